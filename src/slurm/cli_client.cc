// NewCliClient: the Slurm commands, one process per call, each under the
// options' deadline. SLURM_CONF reaches the commands through `env` on their
// command line, never through this process's environment (other threads
// read it).
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "common/subprocess.h"
#include "slurm/cli_parse.h"
#include "slurm/slurm.h"

namespace ringmaster::slurm {
namespace {

// A private directory (0700) holding the batch script (0600: it carries the
// step's tokens) for as long as sbatch reads it; sbatch sends its text to
// slurmctld, so it is removed right after.
class ScriptFile {
 public:
  static StatusOr<std::unique_ptr<ScriptFile>> Write(const std::string& text) {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = fmt::format("{}/rm-sbatch-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(pattern.data()) == nullptr) {
      return Internal(fmt::format("a directory for the batch script ({}): {}", pattern, std::strerror(errno)));
    }
    auto file = std::unique_ptr<ScriptFile>(new ScriptFile(pattern));
    {
      std::ofstream out(file->path(), std::ios::binary);
      out << text;
      if (!out.flush()) return Internal(fmt::format("writing the batch script {}", file->path()));
    }
    if (chmod(file->path().c_str(), 0600) != 0) return Internal(fmt::format("chmod {}", file->path()));
    return file;
  }
  ~ScriptFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path() const { return dir_ + "/job.sh"; }

 private:
  explicit ScriptFile(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

class CliClient final : public Client {
 public:
  explicit CliClient(CliOptions options) : options_(std::move(options)) {}

  StatusOr<int64_t> Submit(const SubmitRequest& request) override {
    RM_RETURN_IF_ERROR(CheckRequest(request));
    RM_ASSIGN_OR_RETURN(auto script, ScriptFile::Write(BatchScript(request)));
    std::vector<std::string> args = {"--parsable"};
    for (auto& a : SbatchArgs(request)) args.push_back(std::move(a));
    args.push_back(script->path());
    RM_ASSIGN_OR_RETURN(ToolOutput run, Run("sbatch", args));
    if (!run.exited_ok()) return CommandError("sbatch", run.wait_status, run.err, StatusCode::kInvalidArgument);
    return ParseSbatchOutput(run.out);
  }

  StatusOr<std::vector<JobInfo>> Jobs(std::string_view name_prefix) override {
    // One call for every job of this user that Slurm remembers (ended ones
    // for MinJobAge), exit status included: cheap for thousands of jobs.
    RM_ASSIGN_OR_RETURN(ToolOutput run, Run("squeue", {"--me", "--states=all", "--noheader",
                                                       fmt::format("--Format={}", kSqueueFormat)}));
    if (!run.exited_ok()) return CommandError("squeue", run.wait_status, run.err, StatusCode::kInternal);
    return ParseSqueue(run.out, name_prefix);
  }

  StatusOr<std::vector<NodeInfo>> Nodes() override {
    RM_ASSIGN_OR_RETURN(ToolOutput run,
                        Run("sinfo", {"--Node", "--noheader", fmt::format("--Format={}", kSinfoFormat)}));
    if (!run.exited_ok()) return CommandError("sinfo", run.wait_status, run.err, StatusCode::kInternal);
    return ParseSinfo(run.out);
  }

  Status Cancel(int64_t job_id) override {
    RM_ASSIGN_OR_RETURN(ToolOutput run, Run("scancel", {std::to_string(job_id)}));
    if (run.exited_ok()) return Status::Ok();
    // Ended already, or forgotten by Slurm (older than MinJobAge): nothing to stop.
    if (run.err.find("already completing or completed") != std::string::npos ||
        run.err.find("Invalid job id") != std::string::npos) {
      return Status::Ok();
    }
    return CommandError("scancel", run.wait_status, run.err, StatusCode::kInternal);
  }

  std::string Describe() const override {
    return options_.conf.empty() ? "slurm (its default configuration)"
                                 : fmt::format("slurm (SLURM_CONF={})", options_.conf);
  }

 private:
  StatusOr<ToolOutput> Run(const std::string& tool, std::vector<std::string> args) const {
    std::vector<std::string> argv;
    if (!options_.conf.empty()) argv = {"env", "SLURM_CONF=" + options_.conf};
    argv.push_back(options_.bin_dir.empty() ? tool : options_.bin_dir + "/" + tool);
    for (auto& a : args) argv.push_back(std::move(a));
    auto run = CaptureTool(argv, options_.timeout);
    // A deadline on sbatch leaves it unknown whether the job was queued: the
    // caller looks for it by name before submitting again.
    if (!run.ok()) return run.status().Annotate(fmt::format("{} via {}", tool, Describe()));
    return run;
  }

  const CliOptions options_;
};

}  // namespace

std::unique_ptr<Client> NewCliClient(CliOptions options) { return std::make_unique<CliClient>(std::move(options)); }

}  // namespace ringmaster::slurm
