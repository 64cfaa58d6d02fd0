#include "slurm/slurm.h"

#include <gtest/gtest.h>

namespace ringmaster::slurm {
namespace {

SubmitRequest Gang() {
  SubmitRequest r;
  r.name = "rm-12.1";
  r.comment = "ringmaster job 12 attempt 1 of alice";
  r.ntasks = 2;
  r.cpus_per_task = 3;
  r.memory_mib_per_task = 1000;
  r.gpus_per_task = 1;
  r.work_dir = "/var/lib/ringmaster";
  r.step_argv = {"/usr/bin/ringmaster", "slurm-step", "--server", "https://s:8443", "--node-prefix", "slurm-12-1-",
                 "--data-dir", "/tmp/rm step"};
  r.env = {{"RINGMASTER_STEP_TOKENS", "tok0,tok1"}};
  return r;
}

TEST(SbatchArgsTest, EveryOptionInItsOrder) {
  SubmitRequest r = Gang();
  r.gpu_type = "a100";
  r.time_limit_minutes = 90;
  r.partition = "gpu";
  r.account = "lab";
  r.qos = "high";
  r.output = "/var/log/rm/%j.out";
  EXPECT_EQ(SbatchArgs(r), (std::vector<std::string>{
                               "--job-name=rm-12.1", "--comment=ringmaster job 12 attempt 1 of alice", "--ntasks=2",
                               "--cpus-per-task=3", "--mem-per-cpu=334M", "--gpus-per-task=a100:1", "--time=90",
                               "--partition=gpu", "--account=lab", "--qos=high", "--no-requeue", "--export=NONE",
                               "--chdir=/var/lib/ringmaster", "--output=/var/log/rm/%j.out"}));
}

TEST(SbatchArgsTest, DefaultsLeaveSlurmsChoices) {
  SubmitRequest r;
  r.name = "rm-1.1";
  r.step_argv = {"true"};
  // No GPUs, no time limit, no partition/account/qos: Slurm's defaults.
  EXPECT_EQ(SbatchArgs(r), (std::vector<std::string>{"--job-name=rm-1.1", "--ntasks=1", "--cpus-per-task=1",
                                                     "--mem-per-cpu=512M", "--no-requeue", "--export=NONE",
                                                     "--chdir=/", "--output=/dev/null"}));
}

TEST(SbatchArgsTest, MemoryPerCpuRoundsUp) {
  SubmitRequest r = Gang();
  r.cpus_per_task = 4;
  r.memory_mib_per_task = 1001;
  EXPECT_EQ(SbatchArgs(r)[4], "--mem-per-cpu=251M");
  r.memory_mib_per_task = 1;
  EXPECT_EQ(SbatchArgs(r)[4], "--mem-per-cpu=1M");
}

TEST(BatchScriptTest, ExportsThenOneSrunStep) {
  EXPECT_EQ(BatchScript(Gang()),
            "#!/bin/sh\n"
            "export RINGMASTER_STEP_TOKENS=tok0,tok1\n"
            "exec srun --kill-on-bad-exit=0 --export=ALL --cpus-per-task=3 /usr/bin/ringmaster slurm-step --server "
            "https://s:8443 --node-prefix slurm-12-1- --data-dir '/tmp/rm step'\n");
}

TEST(BatchScriptTest, OneRankRunsInTheBatchStepItself) {
  SubmitRequest r = Gang();
  r.ntasks = 1;
  r.env = {{"RINGMASTER_STEP_TOKENS", "tok0"}};
  EXPECT_EQ(BatchScript(r),
            "#!/bin/sh\n"
            "export RINGMASTER_STEP_TOKENS=tok0\n"
            "exec /usr/bin/ringmaster slurm-step --server https://s:8443 --node-prefix slurm-12-1- --data-dir "
            "'/tmp/rm step'\n");
}

TEST(BatchScriptTest, HostileValuesStayOneWord) {
  SubmitRequest r = Gang();
  r.env = {{"A", "it's $HOME `id` \"x\" \\ ; rm -rf /"}, {"B", ""}, {"C", "*"}};
  r.step_argv = {"sh", "-c", "echo $SLURM_PROCID > '/tmp/out'", ""};
  EXPECT_EQ(BatchScript(r),
            "#!/bin/sh\n"
            "export A='it'\\''s $HOME `id` \"x\" \\ ; rm -rf /'\n"
            "export B=''\n"
            "export C='*'\n"
            "exec srun --kill-on-bad-exit=0 --export=ALL --cpus-per-task=3 sh -c 'echo $SLURM_PROCID > '\\''/tmp/out'\\'''"
            " ''\n");
}

TEST(ShellQuoteTest, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(ShellQuote("abc-1.2_x/y:z,w@h%+"), "abc-1.2_x/y:z,w@h%+");
  EXPECT_EQ(ShellQuote("A=b"), "'A=b'");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("'"), "''\\'''");
  EXPECT_EQ(ShellQuote("~"), "'~'");
  EXPECT_EQ(ShellQuote("a#b"), "'a#b'");
}

TEST(CheckRequestTest, RefusesWhatTheScriptCannotCarry) {
  EXPECT_TRUE(CheckRequest(Gang()).ok());
  auto refused = [](auto change) {
    SubmitRequest r = Gang();
    change(r);
    Status s = CheckRequest(r);
    return s.code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.env["X"] = "a\nb"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.env["X"] = "a\rb"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.env["X"] = std::string("a\0b", 3); }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.env["BAD NAME"] = "x"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.env["A=B"] = "x"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.env["1A"] = "x"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.env["$(id)"] = "x"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.env[""] = "x"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.name = "rm-1.1\nrm-2.1"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.name = ""; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.comment = "a\nb"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.work_dir = "/a\nb"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.step_argv.push_back("x\ny"); }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.step_argv.clear(); }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.ntasks = 0; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.cpus_per_task = 0; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.memory_mib_per_task = 0; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.gpus_per_task = -1; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.gpu_type = "a100:2,gpu"; }));
  EXPECT_TRUE(refused([](SubmitRequest& r) { r.gpu_type = "a 100"; }));
  EXPECT_FALSE(refused([](SubmitRequest& r) { r.gpu_type = "h100_80gb"; }));
  EXPECT_FALSE(refused([](SubmitRequest& r) { r.env["_ok_9"] = "quotes ' \" $ ` are fine"; }));
}

TEST(PendingReasonTextTest, KnownCodesInWords) {
  for (const char* code :
       {"Resources", "Priority", "ReqNodeNotAvail", "QOSMaxGRESPerUser", "QOSMaxJobsPerUserLimit", "AssocGrpGRES",
        "AssocMaxJobsLimit", "Dependency", "BeginTime", "PartitionTimeLimit", "PartitionNodeLimit", "JobHeldUser",
        "JobHeldAdmin", "NodeDown", "BadConstraints", "Licenses", "Reservation", "launch failed requeued held"}) {
    std::string text = PendingReasonText(code);
    EXPECT_FALSE(text.empty()) << code;
    EXPECT_EQ(text.find("Slurm says"), std::string::npos) << code << ": " << text;
  }
  EXPECT_EQ(PendingReasonText("Resources"), "waiting for resources: the nodes that could run it are busy");
  EXPECT_EQ(PendingReasonText("QOSMaxGRESPerUser"), "waiting: the user has as many GPUs as the Slurm QOS allows running");
}

TEST(PendingReasonTextTest, UnavailableNodesAreNamed) {
  EXPECT_EQ(PendingReasonText("ReqNodeNotAvail, UnavailableNodes:n1"),
            "waiting: a node it needs is not available (down, drained or reserved) (unavailable: n1)");
  EXPECT_EQ(PendingReasonText("ReqNodeNotAvail, UnavailableNodes:n[1-3],gpu7"),
            "waiting: a node it needs is not available (down, drained or reserved) (unavailable: n[1-3],gpu7)");
  EXPECT_EQ(PendingReasonText("ReqNodeNotAvail, UnavailableNodes:"),
            "waiting: a node it needs is not available (down, drained or reserved)");
}

TEST(PendingReasonTextTest, UnknownCodesAreQuoted) {
  EXPECT_EQ(PendingReasonText("SomethingNew"), "Slurm says: SomethingNew");
  EXPECT_EQ(PendingReasonText(""), "");
  EXPECT_FALSE(PendingReasonText("None").empty());
}

TEST(EndOfTest, EveryState) {
  EXPECT_EQ(EndOf("PENDING"), EndKind::kNotEnded);
  EXPECT_EQ(EndOf("RUNNING"), EndKind::kNotEnded);
  EXPECT_EQ(EndOf("COMPLETING"), EndKind::kNotEnded);
  EXPECT_EQ(EndOf("SUSPENDED"), EndKind::kNotEnded);
  EXPECT_EQ(EndOf("REQUEUED"), EndKind::kNotEnded);
  EXPECT_EQ(EndOf("CONFIGURING"), EndKind::kNotEnded);
  EXPECT_EQ(EndOf("COMPLETED"), EndKind::kCompleted);
  EXPECT_EQ(EndOf("FAILED"), EndKind::kFailed);
  EXPECT_EQ(EndOf("CANCELLED"), EndKind::kCancelled);
  EXPECT_EQ(EndOf("CANCELLED by 0"), EndKind::kCancelled);
  EXPECT_EQ(EndOf("TIMEOUT"), EndKind::kTimeout);
  EXPECT_EQ(EndOf("NODE_FAIL"), EndKind::kNodeFail);
  EXPECT_EQ(EndOf("BOOT_FAIL"), EndKind::kNodeFail);
  EXPECT_EQ(EndOf("PREEMPTED"), EndKind::kNodeFail);
  EXPECT_EQ(EndOf("OUT_OF_MEMORY"), EndKind::kOutOfMemory);
  EXPECT_EQ(EndOf("DEADLINE"), EndKind::kDeadline);
  EXPECT_EQ(EndOf(""), EndKind::kNotEnded);
}

}  // namespace
}  // namespace ringmaster::slurm
