// The job spec's JSON, what the server stores and every reader of a job gets:
// spec -> JSON -> spec gives the spec back with every field set, JSON -> spec
// -> JSON gives the same text, and one full spec's JSON is pinned word for
// word, so a key renamed on either side fails here first.
#include <gtest/gtest.h>

#include <string>

#include "protocol/job_spec.h"

namespace ringmaster::protocol {
namespace {

// Every field away from its default, so that a key one side writes and the
// other does not read loses a value.
constexpr char kFullSpec[] = R"(
name: resnet
kind: distributed
command: [python3, train.py, --epochs, "3"]
env: {SEED: "7", MODE: fast}
image: torch
executor: runc
network: overlay
resources:
  cpu: 1500m
  memory: 3Gi
  disk: 10Gi
  pids: 2048
  io: {read_bps: 100Mi, write_bps: 50Mi, read_iops: 400, write_iops: 300}
  gpu: 2
  gpu_type: [v100, a100]
  gpu_throughput: {v100: 1.5, a100: 3}
replicas: {min: 2, max: 6}
autoscale: {metric: gpu, scale_up_above: 85, scale_down_below: 20, window: 45s, cooldown: 90s}
max_restarts: 4
priority: 12
node_selector: {rack: r1, zone: b}
time_limit: 2h
working_dir: /srv/work
inputs: [{from: datasets/imagenet, to: data/}, {from: models/base.pt}]
outputs: [outputs/, logs/run.txt]
keep_checkpoints: 5
)";

// kFullSpec as the server stores it.
constexpr char kFullSpecJson[] =
    R"({"autoscale":{"cooldown":"90","metric":"gpu","scale_down_below":20.0,"scale_up_above":85.0,"window":"45"},)"
    R"("command":["python3","train.py","--epochs","3"],"elastic":{"max":6,"min":2},"env":{"MODE":"fast","SEED":"7"},)"
    R"("executor":"runc","image":"torch","inputs":[{"from":"datasets/imagenet","to":"data"},)"
    R"({"from":"models/base.pt","to":"base.pt"}],"keep_checkpoints":5,"kind":"distributed","max_restarts":4,)"
    R"("name":"resnet","network":"overlay","node_selector":{"rack":"r1","zone":"b"},)"
    R"("outputs":["outputs","logs/run.txt"],"priority":12,"replicas":2,)"
    R"("resources":{"cpu":"1.5","disk":10737418240,"gpu":2,"gpu_throughput":{"a100":3.0,"v100":1.5},"gpu_type":["v100","a100"],)"
    R"("io":{"read_bps":104857600,"read_iops":400,"write_bps":52428800,"write_iops":300},"memory":3221225472,)"
    R"("pids":2048},"time_limit":"7200","working_dir":"/srv/work"})";

// A job with roles (which an elastic job cannot have).
constexpr char kRolesSpec[] = "command: x\nkind: distributed\nreplicas: {chief: 1, ps: 2, worker: 3, evaluator: 1}\n";

JobSpec Parsed(const std::string& text) {
  StatusOr<JobSpec> spec = ParseJobSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : JobSpec{};
}

TEST(JobSpecJson, TheFullSpecSetsEveryField) {
  const JobSpec spec = Parsed(kFullSpec);
  const JobSpec defaults;
  EXPECT_NE(spec.name, defaults.name);
  EXPECT_NE(spec.kind, defaults.kind);
  EXPECT_NE(spec.command, defaults.command);
  EXPECT_NE(spec.env, defaults.env);
  EXPECT_NE(spec.image, defaults.image);
  EXPECT_NE(spec.executor, defaults.executor);
  EXPECT_NE(spec.network, defaults.network);
  EXPECT_NE(spec.cpu_milli, defaults.cpu_milli);
  EXPECT_NE(spec.memory_bytes, defaults.memory_bytes);
  EXPECT_NE(spec.pids, defaults.pids);
  EXPECT_NE(spec.disk_bytes, defaults.disk_bytes);
  EXPECT_NE(spec.io.read_bps, 0);
  EXPECT_NE(spec.io.write_bps, 0);
  EXPECT_NE(spec.io.read_iops, 0);
  EXPECT_NE(spec.io.write_iops, 0);
  EXPECT_NE(spec.gpus, defaults.gpus);
  EXPECT_NE(spec.gpu_types, defaults.gpu_types);
  EXPECT_NE(spec.gpu_throughput, defaults.gpu_throughput);
  EXPECT_NE(spec.replicas, defaults.replicas);
  EXPECT_NE(spec.min_replicas, defaults.min_replicas);
  EXPECT_NE(spec.max_replicas, defaults.max_replicas);
  ASSERT_TRUE(spec.autoscale.has_value());
  const JobSpec::Autoscale as_defaults;
  EXPECT_NE(spec.autoscale->metric, as_defaults.metric);
  EXPECT_NE(spec.autoscale->scale_up_above, as_defaults.scale_up_above);
  EXPECT_NE(spec.autoscale->scale_down_below, as_defaults.scale_down_below);
  EXPECT_NE(spec.autoscale->window_ms, as_defaults.window_ms);
  EXPECT_NE(spec.autoscale->cooldown_ms, as_defaults.cooldown_ms);
  EXPECT_NE(spec.max_restarts, defaults.max_restarts);
  EXPECT_NE(spec.priority, defaults.priority);
  EXPECT_NE(spec.node_selector, defaults.node_selector);
  EXPECT_NE(spec.time_limit_ms, defaults.time_limit_ms);
  EXPECT_NE(spec.working_dir, defaults.working_dir);
  EXPECT_NE(spec.inputs, defaults.inputs);
  EXPECT_NE(spec.outputs, defaults.outputs);
  EXPECT_NE(spec.keep_checkpoints, defaults.keep_checkpoints);
  EXPECT_NE(Parsed(kRolesSpec).roles, defaults.roles);
}

TEST(JobSpecJson, SpecToJsonToSpecGivesTheSpecBack) {
  for (const char* text : {kFullSpec, kRolesSpec, "command: x\n"}) {
    const JobSpec spec = Parsed(text);
    StatusOr<JobSpec> back = JobSpecFromJson(JobSpecToJson(spec).dump());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(*back == spec) << text << " -> " << JobSpecToJson(spec).dump();
  }
}

TEST(JobSpecJson, JsonToSpecToJsonIsStable) {
  for (const std::string& json : std::vector<std::string>{kFullSpecJson, JobSpecToJson(Parsed(kRolesSpec)).dump(),
                                 JobSpecToJson(Parsed("command: x\n")).dump()}) {
    StatusOr<JobSpec> spec = JobSpecFromJson(json);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_EQ(JobSpecToJson(*spec).dump(), json);
  }
}

TEST(JobSpecJson, TheFullSpecsJsonIsPinned) {
  EXPECT_EQ(JobSpecToJson(Parsed(kFullSpec)).dump(), kFullSpecJson);
  EXPECT_EQ(JobSpecToJson(Parsed(kRolesSpec)).dump(),
            R"({"command":["/bin/sh","-c","x"],"env":{},"keep_checkpoints":3,"kind":"distributed","max_restarts":0,)"
            R"("name":"distributed","outputs":["outputs"],"priority":0,"replicas":7,"resources":{"cpu":"1","gpu":0,)"
            R"("memory":536870912,"pids":4096},"roles":[{"count":1,"name":"chief"},{"count":2,"name":"ps"},)"
            R"({"count":3,"name":"worker"},{"count":1,"name":"evaluator"}]})");
}

}  // namespace
}  // namespace ringmaster::protocol
