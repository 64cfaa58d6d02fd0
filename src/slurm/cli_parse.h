// What the Slurm commands print, read: the formats the CLI client asks
// squeue and sinfo for, their parsers, and the way a failed command's stderr
// becomes a Status. Internal to rm_slurm (cli_client.cc and its tests). Pure
// functions, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "slurm/slurm.h"

namespace ringmaster::slurm {

// squeue -O: '|' ends each field and the name comes last, so a '|' in a name
// (Slurm allows it) cannot shift the others. exit_code is the raw wait status.
inline constexpr std::string_view kSqueueFormat = "JobID:0|,State:0|,Reason:0|,NodeList:0|,exit_code:0|,Name:0";
// sinfo -N -O: a node a line (once per partition); the free-text reason last.
inline constexpr std::string_view kSinfoFormat =
    "NodeList:0|,StateLong:0|,CPUsState:0|,Memory:0|,AllocMem:0|,Gres:0|,GresUsed:0|,NodeAddr:0|,Reason:0";

// The jobs in squeue's output (kSqueueFormat, no header) whose name starts
// with `name_prefix`; lines that do not parse (another job's name with a line
// break) are skipped.
std::vector<JobInfo> ParseSqueue(std::string_view out, std::string_view name_prefix);
// The nodes in sinfo's output (kSinfoFormat, no header), each once.
std::vector<NodeInfo> ParseSinfo(std::string_view out);
// The GPUs in a GRES list: "gpu:2", "gpu:a100:2(IDX:0-1),gpu:v100:1(S:0)",
// "gpu:(null):0", "(null)" -> all gpu entries' counts summed.
int GpuCount(std::string_view gres);
// sbatch --parsable's answer ("123" or "123;cluster").
StatusOr<int64_t> ParseSbatchOutput(std::string_view out);

// Why a Slurm command failed, from its exit status and stderr: Unavailable
// when Slurm could not be reached (or refused to talk: munge), NotFound when
// the command is not installed, else `refused` (InvalidArgument for sbatch:
// Slurm refused the request itself) with Slurm's one-line message.
Status CommandError(std::string_view command, int wait_status, std::string_view err, StatusCode refused);
// Slurm's message in a command's stderr: the last error line without its
// "sbatch: error: Batch job submission failed: " prefixes.
std::string SlurmMessage(std::string_view err);

}  // namespace ringmaster::slurm
