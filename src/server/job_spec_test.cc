#include "server/job_spec.h"

#include <gtest/gtest.h>

namespace ringmaster::server {
namespace {

std::string ErrorOf(const std::string& yaml) {
  auto spec = ParseJobSpec(yaml);
  EXPECT_FALSE(spec.ok()) << yaml;
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  return spec.status().message();
}

TEST(JobSpec, ParsesAFullSpec) {
  auto spec = ParseJobSpec(R"(
name: mnist
kind: distributed
command: ["python3", "train.py", "--epochs", "2"]
env: {SEED: 7, MODE: fast}
image: ringmaster/torch:1.13
resources: {cpu: 500m, memory: 2Gi, gpu: 1, gpu_type: a100}
replicas: 4
max_restarts: 2
priority: 10
working_dir: /srv/work
)");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->name, "mnist");
  EXPECT_EQ(spec->kind, "distributed");
  EXPECT_EQ(spec->command.size(), 4u);
  EXPECT_EQ(spec->env.at("SEED"), "7");
  EXPECT_EQ(spec->cpu_milli, 500);
  EXPECT_EQ(spec->memory_bytes, 2LL << 30);
  EXPECT_EQ(spec->gpus, 1);
  EXPECT_EQ(spec->gpu_types, std::vector<std::string>{"a100"});
  EXPECT_EQ(spec->replicas, 4);
  EXPECT_EQ(spec->max_restarts, 2);
  EXPECT_EQ(spec->priority, 10);
  EXPECT_EQ(spec->working_dir, "/srv/work");
}

TEST(JobSpec, StringCommandRunsThroughTheShellAndDefaultsApply) {
  auto spec = ParseJobSpec("command: echo hi && echo there\n");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->command, (std::vector<std::string>{"/bin/sh", "-c", "echo hi && echo there"}));
  EXPECT_EQ(spec->kind, "train");
  EXPECT_EQ(spec->name, "train");
  EXPECT_EQ(spec->replicas, 1);
  EXPECT_EQ(spec->cpu_milli, 1000);
}

TEST(JobSpec, AcceptsJson) {
  auto spec = ParseJobSpec(R"({"name": "j", "command": ["true"], "replicas": 2})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->replicas, 2);
}

TEST(JobSpec, RoundTripsThroughJson) {
  auto spec = ParseJobSpec("command: [a, b]\nresources: {cpu: 1.25, memory: 1000001}\nenv: {X: y}\n");
  ASSERT_TRUE(spec.ok());
  JobSpec back = JobSpecFromJson(JobSpecToJson(*spec).dump()).value();
  EXPECT_EQ(back.command, spec->command);
  EXPECT_EQ(back.cpu_milli, 1250);
  EXPECT_EQ(back.memory_bytes, 1000001);
  EXPECT_EQ(back.env, spec->env);
  // The normalised JSON is itself a valid spec.
  auto again = ParseJobSpec(JobSpecToJson(*spec).dump());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->memory_bytes, 1000001);
}

TEST(JobSpec, ErrorsNameTheField) {
  EXPECT_EQ(ErrorOf("command: x\nresources: {memory: lots}\n"),
            "resources.memory: \"lots\" is not a size (use e.g. 512Mi or 4Gi)");
  EXPECT_EQ(ErrorOf("command: x\nresources: {cpu: -1}\n"), "resources.cpu: must be > 0, got -1");
  EXPECT_EQ(ErrorOf("command: x\nresources: {cpu: 0}\n"), "resources.cpu: must be > 0, got 0");
  EXPECT_EQ(ErrorOf("command: x\nresources: {gpus: 1}\n").rfind("resources.gpus: unknown field", 0), 0u);
  EXPECT_EQ(ErrorOf("command: x\ncolour: red\n").rfind("colour: unknown field", 0), 0u);
  EXPECT_EQ(ErrorOf("name: x\n"), "command: required (a string run by /bin/sh, or a list of arguments)");
  EXPECT_EQ(ErrorOf("command: x\nreplicas: 0\n"), "replicas: must be between 1 and 1024, got 0");
  EXPECT_EQ(ErrorOf("command: x\nreplicas: two\n"), "replicas: \"two\" is not an integer");
  EXPECT_EQ(ErrorOf("command: x\nkind: batch\n"),
            "kind: \"batch\" is not a job kind (expected dev, train or distributed)");
  EXPECT_EQ(ErrorOf("command: x\nworking_dir: rel/dir\n"), "working_dir: \"rel/dir\" must be an absolute path");
  EXPECT_EQ(ErrorOf("command: [a, [b]]\n"), "command[1]: must be a string, got a list");
  EXPECT_EQ(ErrorOf("command: x\nenv: {1BAD: v}\n"), "env.1BAD: not a valid variable name");
  EXPECT_EQ(ErrorOf("command: x\nkind: dev\nreplicas: 2\n"), "replicas: a dev job has exactly 1 replica, got 2");
}

TEST(JobSpec, ElasticReplicasAreARangeForDistributedJobs) {
  auto spec = ParseJobSpec("command: x\nkind: distributed\nreplicas: {min: 2, max: 8}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->replicas, 2);  // it starts at min
  EXPECT_TRUE(spec->elastic());
  JobSpec back = JobSpecFromJson(JobSpecToJson(*spec).dump()).value();
  EXPECT_EQ(back.min_replicas, 2);
  EXPECT_EQ(back.max_replicas, 8);
  EXPECT_FALSE(ParseJobSpec("command: x\nreplicas: 3\n")->elastic());
  EXPECT_EQ(ErrorOf("command: x\nkind: distributed\nreplicas: {min: 4, max: 2}\n"),
            "replicas.max: must be >= replicas.min (4), got 2");
  EXPECT_EQ(ErrorOf("command: x\nkind: distributed\nreplicas: {min: 2}\n"),
            "replicas: an elastic range needs both min and max");
  EXPECT_EQ(ErrorOf("command: x\nreplicas: {min: 1, max: 2}\n"),
            "replicas: an elastic range needs kind: distributed, not train");
  EXPECT_EQ(ErrorOf("command: x\nkind: distributed\nreplicas: {min: 0, max: 2}\n"),
            "replicas.min: must be between 1 and 1024, got 0");
  EXPECT_EQ(ErrorOf("command: x\nkind: distributed\nreplicas: {min: 1, max: 2, step: 1}\n").rfind(
                "replicas.step: unknown field", 0),
            0u);
}

TEST(JobSpec, SeveralGpuTypesThroughputsAndATimeLimit) {
  auto spec = ParseJobSpec(
      "command: x\ntime_limit: 90m\n"
      "resources: {gpu: 2, gpu_type: [v100, p100], gpu_throughput: {v100: 3.1, p100: 2}}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->gpu_types, (std::vector<std::string>{"v100", "p100"}));
  EXPECT_DOUBLE_EQ(spec->gpu_throughput.at("v100"), 3.1);
  EXPECT_EQ(spec->time_limit_ms, 90 * 60'000);
  JobSpec back = JobSpecFromJson(JobSpecToJson(*spec).dump()).value();
  EXPECT_EQ(back.gpu_types, spec->gpu_types);
  EXPECT_EQ(back.gpu_throughput, spec->gpu_throughput);
  EXPECT_EQ(back.time_limit_ms, spec->time_limit_ms);
  auto again = ParseJobSpec(JobSpecToJson(*spec).dump());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->time_limit_ms, spec->time_limit_ms);
  // A spec stored before gpu_type could be a list still reads.
  nlohmann::json old = JobSpecToJson(*spec);
  old["resources"]["gpu_type"] = "a100";
  EXPECT_EQ(JobSpecFromJson(old.dump()).value().gpu_types, std::vector<std::string>{"a100"});

  auto sel = ParseJobSpec("command: x\nnode_selector: {rack: r1, net: ib}\n");
  ASSERT_TRUE(sel.ok()) << sel.status().ToString();
  EXPECT_EQ(JobSpecFromJson(JobSpecToJson(*sel).dump()).value().node_selector,
            (std::map<std::string, std::string>{{"net", "ib"}, {"rack", "r1"}}));
  EXPECT_EQ(ErrorOf("command: x\nnode_selector: [rack]\n"), "node_selector: must map label names to values, got a list");
  EXPECT_EQ(ErrorOf("command: x\nnode_selector: {rack: [a]}\n"), "node_selector.rack: must be a string, got a list");
  EXPECT_EQ(ErrorOf("command: x\ntime_limit: soon\n"),
            "time_limit: \"soon\" is not a duration (use e.g. 90m, 2h or 3600)");
  EXPECT_EQ(ErrorOf("command: x\nresources: {gpu: 1, gpu_throughput: {v100: fast}}\n"),
            "resources.gpu_throughput.v100: must be a number > 0, got \"fast\"");
  EXPECT_EQ(ErrorOf("command: x\nresources: {gpu: 1, gpu_type: []}\n"),
            "resources.gpu_type: an empty list accepts no GPU");
  EXPECT_EQ(ErrorOf("command: x\nresources: {gpu: 1, gpu_type: [v100, [a]]}\n"),
            "resources.gpu_type[1]: must be a string, got a list");
}

TEST(JobSpec, BadYamlSaysWhere) {
  std::string err = ErrorOf("command: [unclosed\n");
  EXPECT_EQ(err.rfind("spec: not valid YAML or JSON: line", 0), 0u) << err;
  EXPECT_EQ(ErrorOf("- just\n- a list\n"), "spec: must be a mapping of fields, got a list");
  EXPECT_EQ(ErrorOf(""), "spec: must be a mapping of fields, got null");
}

}  // namespace
}  // namespace ringmaster::server
