// CDI specs: what the parser accepts (specs as nvidia-ctk writes them, in YAML
// and JSON) and refuses (naming the field), and how the registry maps a
// task's GPUs to edits across spec files, priorities, conflicts and changes.
// Device nodes point at /dev/null, a character device every machine has.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "agent/container/cdi.h"

namespace ringmaster::agent {
namespace {

// A spec shaped like `nvidia-ctk cdi generate`'s (devices by index and UUID, "all").
std::string NvidiaSpec(const std::string& version = "0.5.0") {
  return fmt::format(R"(---
cdiVersion: {}
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      hostPath: /dev/null
- name: GPU-aaaa
  containerEdits:
    env: [WHICH=uuid-aaaa]
    deviceNodes:
    - path: /dev/nvidia0
      hostPath: /dev/null
- name: "1"
  containerEdits:
    deviceNodes:
    - {{path: /dev/nvidia1, hostPath: /dev/null}}
- name: all
  containerEdits:
    deviceNodes:
    - {{path: /dev/nvidia0, hostPath: /dev/null}}
    - {{path: /dev/nvidia1, hostPath: /dev/null}}
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
    hostPath: /dev/null
    permissions: rw
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05
    options: [ro, nosuid, nodev, bind]
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-ctk
    args: [nvidia-ctk, hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
    env: [NVIDIA_CTK_DEBUG=false]
    timeout: 10
)",
                     version);
}

TEST(CdiParse, ReadsASpecAsNvidiaCtkWritesIt) {
  auto spec = ParseCdiSpec(NvidiaSpec(), "/etc/cdi/nvidia.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->kind, "nvidia.com/gpu");
  EXPECT_EQ(spec->version, "0.5.0");
  ASSERT_EQ(spec->devices.size(), 4u);
  EXPECT_EQ(spec->devices[1].name, "GPU-aaaa");
  EXPECT_EQ(spec->devices[1].edits.env, std::vector<std::string>{"WHICH=uuid-aaaa"});
  EXPECT_EQ(spec->devices[3].edits.device_nodes.size(), 2u);
  const CdiEdits& e = spec->edits;
  EXPECT_EQ(e.env, std::vector<std::string>{"NVIDIA_VISIBLE_DEVICES=void"});
  ASSERT_EQ(e.device_nodes.size(), 1u);
  EXPECT_EQ(e.device_nodes[0].path, "/dev/nvidiactl");
  EXPECT_EQ(e.device_nodes[0].HostPath(), "/dev/null");
  EXPECT_EQ(e.device_nodes[0].permissions, "rw");
  EXPECT_FALSE(e.device_nodes[0].major.has_value());
  ASSERT_EQ(e.mounts.size(), 1u);
  EXPECT_EQ(e.mounts[0].options, (std::vector<std::string>{"ro", "nosuid", "nodev", "bind"}));
  ASSERT_EQ(e.hooks.size(), 1u);
  EXPECT_EQ(e.hooks[0].hook_name, "createContainer");
  EXPECT_EQ(e.hooks[0].args[2], "update-ldcache");
  EXPECT_EQ(e.hooks[0].timeout, 10);
  EXPECT_EQ(e.hooks[0].spec, "/etc/cdi/nvidia.yaml");
}

TEST(CdiParse, JsonIsReadTheSame) {
  const std::string json = R"({"cdiVersion": "0.7.0", "kind": "example.com/fpga",
    "devices": [{"name": "card0", "containerEdits": {"deviceNodes": [{"path": "/dev/fpga0", "type": "c", "major": 511,
      "minor": 3, "fileMode": 432, "uid": 0, "gid": 44}], "additionalGids": [44, 0]}}],
    "containerEdits": {"mounts": [{"hostPath": "tmpfs", "containerPath": "/scratch", "type": "tmpfs"}]}})";
  auto spec = ParseCdiSpec(json, "/var/run/cdi/fpga.json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const CdiDeviceNode& d = spec->devices[0].edits.device_nodes[0];
  EXPECT_EQ(d.type, "c");
  EXPECT_EQ(d.major, 511);
  EXPECT_EQ(d.minor, 3);
  EXPECT_EQ(d.file_mode, 0660u);
  EXPECT_EQ(d.gid, 44u);
  EXPECT_EQ(spec->devices[0].edits.additional_gids, std::vector<uint32_t>{44});  // 0 is ignored
  EXPECT_EQ(spec->edits.mounts[0].type, "tmpfs");
  // YAML's octal file modes, as Go's reader takes them.
  auto octal = ParseCdiSpec("cdiVersion: 0.3.0\nkind: a.b/c\ndevices: [{name: d, containerEdits: "
                            "{deviceNodes: [{path: /dev/d, fileMode: 0666}]}}]\n", "x.yaml");
  ASSERT_TRUE(octal.ok()) << octal.status().ToString();
  EXPECT_EQ(octal->devices[0].edits.device_nodes[0].file_mode, 0666u);
}

std::string ErrorOf(const std::string& text) {
  auto spec = ParseCdiSpec(text, "bad.yaml");
  return spec.ok() ? "(parsed)" : spec.status().message();
}

// A minimal valid spec with `device` as its one device's body.
std::string With(const std::string& device, const std::string& version = "0.8.0", const std::string& more = "") {
  return "cdiVersion: " + version + "\nkind: nvidia.com/gpu\n" + more + "devices:\n- " + device + "\n";
}

TEST(CdiParse, MalformedSpecsAreRefusedNamingTheField) {
  const std::string ok = "{name: g, containerEdits: {env: [A=1]}}";
  ASSERT_EQ(ErrorOf(With(ok)), "(parsed)");
  const std::pair<std::string, std::string> cases[] = {
      {"[1, 2]", "spec: must be a mapping, got a list"},
      {With(ok) + "vendor: x\n", "vendor: unknown field (expected one of: cdiVersion, kind, annotations, devices, containerEdits)"},
      {With(ok) + "kind: a/b\n", "kind: given twice"},
      {With(ok, "1.0.0"), "cdiVersion: \"1.0.0\" is not a version this agent reads (0.3.0 to 0.8.0)"},
      {With(ok, "0.2.0"), "cdiVersion: \"0.2.0\" is not a version this agent reads (0.3.0 to 0.8.0)"},
      {"cdiVersion: 0.5.0\nkind: nvidia\ndevices: [" + ok + "]\n", "kind: \"nvidia\" is not vendor/class (e.g. nvidia.com/gpu)"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n", "devices: missing"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n", "devices: empty (a spec needs at least one device)"},
      {With("{name: -g, containerEdits: {env: [A=1]}}"),
       "devices[0].name: \"-g\" is not a device name (letters, digits, _ - . :, starting and ending with a letter or digit)"},
      {With(ok) + "- " + ok + "\n", "devices[1].name: \"g\" is named twice"},
      {With("{name: g}"), "devices[0].containerEdits: missing"},
      {With("{name: g, containerEdits: {}}"), "devices[0].containerEdits: a device needs at least one edit"},
      {With("{name: g, containerEdits: {env: [NOVALUE]}}"), "devices[0].containerEdits.env[0]: \"NOVALUE\" is not NAME=VALUE"},
      {With("{name: g, containerEdits: {env: A=1}}"), "devices[0].containerEdits.env: must be a list, got a scalar"},
      {With("{name: g, containerEdits: {deviceNodes: [{path: dev/x}]}}"),
       "devices[0].containerEdits.deviceNodes[0].path: \"dev/x\" is not an absolute path"},
      {With("{name: g, containerEdits: {deviceNodes: [{hostPath: /dev/x}]}}"), "devices[0].containerEdits.deviceNodes[0].path: missing"},
      {With("{name: g, containerEdits: {deviceNodes: [{path: /dev/x, type: x}]}}"),
       "devices[0].containerEdits.deviceNodes[0].type: \"x\" is not b, c, u or p"},
      {With("{name: g, containerEdits: {deviceNodes: [{path: /dev/x, major: -1}]}}"),
       "devices[0].containerEdits.deviceNodes[0].major: must be 0..4294967295, got -1"},
      {With("{name: g, containerEdits: {deviceNodes: [{path: /dev/x, minor: one}]}}"),
       "devices[0].containerEdits.deviceNodes[0].minor: \"one\" is not an integer"},
      {With("{name: g, containerEdits: {deviceNodes: [{path: /dev/x, permissions: rx}]}}"),
       "devices[0].containerEdits.deviceNodes[0].permissions: \"rx\" is not some of r, w, m (or none)"},
      {With("{name: g, containerEdits: {deviceNodes: [{path: /dev/x, owner: 0}]}}"),
       "devices[0].containerEdits.deviceNodes[0].owner: unknown field (expected one of: path, hostPath, type, major, "
       "minor, fileMode, permissions, uid, gid)"},
      {With("{name: g, containerEdits: {mounts: [{hostPath: /a}]}}"), "devices[0].containerEdits.mounts[0].containerPath: missing"},
      {With("{name: g, containerEdits: {mounts: [{hostPath: /a, containerPath: /b, options: ro}]}}"),
       "devices[0].containerEdits.mounts[0].options: must be a list, got a scalar"},
      {With("{name: g, containerEdits: {hooks: [{hookName: prestop, path: /bin/true}]}}"),
       "devices[0].containerEdits.hooks[0].hookName: \"prestop\" is not one of prestart, createRuntime, createContainer, "
       "startContainer, poststart, poststop"},
      {With("{name: g, containerEdits: {hooks: [{hookName: poststop, path: true}]}}"),
       "devices[0].containerEdits.hooks[0].path: \"true\" is not an absolute path"},
      {With("{name: g, containerEdits: {hooks: [{hookName: poststop, path: /bin/true, timeout: 0}]}}"),
       "devices[0].containerEdits.hooks[0].timeout: must be 1..86400, got 0"},
      {With("{name: g, containerEdits: {intelRdt: {closID: x}}}"),
       "devices[0].containerEdits.intelRdt: Intel RDT is not supported by this agent"},
      // Features newer than the version the spec claims.
      {With("{name: g, containerEdits: {deviceNodes: [{path: /dev/x, hostPath: /dev/y}]}}", "0.4.0"),
       "cdiVersion: 0.4.0, but devices[0].containerEdits.deviceNodes[0].hostPath needs 0.5.0"},
      {With("{name: g, containerEdits: {mounts: [{hostPath: /a, containerPath: /b, type: bind}]}}", "0.3.0"),
       "cdiVersion: 0.3.0, but devices[0].containerEdits.mounts[0].type needs 0.4.0"},
      {With("{name: \"0\", containerEdits: {env: [A=1]}}", "0.4.0"), "cdiVersion: 0.4.0, but devices[0].name needs 0.5.0"},
      {With(ok, "0.5.0", "annotations: {a: b}\n"), "cdiVersion: 0.5.0, but annotations needs 0.6.0"},
      {With("{name: g, containerEdits: {additionalGids: [5]}}", "0.6.0"),
       "cdiVersion: 0.6.0, but devices[0].containerEdits.additionalGids[0] needs 0.7.0"},
      {"cdiVersion: 0.5.0\n---\nkind: a/b\n", "spec: more than one YAML document"},
      // yaml-cpp finds endless documents in this (LoadAll would take all memory).
      {",\n[", "spec: more than one YAML document"},
      {"cdiVersion: " + std::string(20, '[') + std::string(20, ']'), "spec: nested more than 16 levels deep (line 1)"},
      {std::string(100'000, '['), "spec: nested more than 32 levels deep (line 1)"},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(ErrorOf(text), want) << text.substr(0, 200);
  EXPECT_EQ(ErrorOf("cdiVersion: [0.5.0\n").rfind("spec: not valid YAML or JSON: line ", 0), 0u) << ErrorOf("cdiVersion: [0.5.0\n");
  EXPECT_EQ(ErrorOf(std::string(5 << 20, '#')), "spec: 5242880 bytes, more than the limit of 4194304");
}

TEST(CdiParse, AliasesCannotMultiplyTheWork) {
  // 1,000 mounts of 1,000 options each, aliased by 1,000 devices: 10^9 nodes from 100 KB.
  std::string text = "cdiVersion: 0.5.0\nkind: a.b/c\ncontainerEdits:\n  mounts: &m\n  - {hostPath: /a, containerPath: /b, options: &o [";
  for (int i = 0; i < 1000; ++i) text += "ro, ";
  text += "ro]}\n";
  for (int i = 1; i < 1000; ++i) text += "  - {hostPath: /a, containerPath: /b, options: *o}\n";
  text += "devices:\n";
  for (int i = 0; i < 1000; ++i) text += fmt::format("- {{name: d{}, containerEdits: {{mounts: *m}}}}\n", i);
  const std::string err = ErrorOf(text);
  EXPECT_EQ(err.rfind("containerEdits.mounts[", 0), 0u) << err.substr(0, 300);
  EXPECT_NE(err.find(": the spec expands to more than 1000000 nodes (YAML aliases?)"), std::string::npos) << err.substr(0, 300);
}

// A broken spec must never take the agent down: 20,000 seeded mutations of
// a good one (bytes changed, inserted, cut) each parse or are refused. (It
// found yaml-cpp's endless documents: run under `ulimit -v` when changing it.)
TEST(CdiParse, MutatedSpecsAreParsedOrRefusedNeverCrash) {
  const std::string good = NvidiaSpec();
  const std::string alphabet = "{}[]:,-\"' \n&*!#|>0a/=.";
  std::mt19937 rng(20261205);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: text.resize(at); break;
      }
    }
    auto spec = ParseCdiSpec(text, "fuzz.yaml");
    if (spec.ok()) {
      ++parsed;
      EXPECT_FALSE(spec->devices.empty());
    } else {
      ++refused;
      EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
      EXPECT_FALSE(spec.status().message().empty());
    }
  }
  EXPECT_GT(parsed, 0);  // some mutations land in comments or values that stay valid
  EXPECT_GT(refused, 10000);
}

// A temp dir of spec dirs, removed at the end.
class CdiRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rm-cdi-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    std::filesystem::create_directories(root_ + "/etc");
    std::filesystem::create_directories(root_ + "/run");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    const std::string tmp = root_ + "/" + rel + ".tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, root_ + "/" + rel);  // a new inode: seen as changed whatever its size and time
  }
  CdiRegistry Registry() { return CdiRegistry({root_ + "/etc", root_ + "/run"}); }
  std::string root_;
  const std::map<int, std::string> uuids_ = {{0, "GPU-aaaa"}, {1, "GPU-bbbb"}};
};

TEST_F(CdiRegistryTest, GpusMapToTheirDevicesWithTheSpecsOwnEditsOnce) {
  Write("etc/nvidia.yaml", NvidiaSpec());
  Write("etc/notes.txt", "not a spec");
  CdiRegistry r = Registry();
  auto s = r.Refresh();
  EXPECT_EQ(s.loaded, std::vector<std::string>{root_ + "/etc/nvidia.yaml: nvidia.com/gpu, 4 devices (cdiVersion 0.5.0)"});
  EXPECT_TRUE(s.problems.empty());
  // GPU 0 by its UUID's name (its env says so), GPU 1 by its index.
  auto e = r.EditsForGpus({0, 1}, uuids_);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->env, (std::vector<std::string>{"NVIDIA_VISIBLE_DEVICES=void", "WHICH=uuid-aaaa"}));
  ASSERT_EQ(e->device_nodes.size(), 3u);  // nvidiactl (the spec's, once), nvidia0, nvidia1
  EXPECT_EQ(e->device_nodes[1].path, "/dev/nvidia0");
  EXPECT_EQ(e->device_nodes[2].path, "/dev/nvidia1");
  for (const CdiDeviceNode& d : e->device_nodes) {  // resolved from the host node, /dev/null (1:3)
    EXPECT_EQ(d.type, "c");
    EXPECT_EQ(d.major, 1);
    EXPECT_EQ(d.minor, 3);
  }
  EXPECT_EQ(e->mounts.size(), 1u);
  EXPECT_EQ(e->hooks.size(), 1u);
  EXPECT_EQ(e->specs, std::vector<std::string>{root_ + "/etc/nvidia.yaml"});
  // Without NVML's UUIDs, by index.
  auto by_index = r.EditsForGpus({0}, {});
  ASSERT_TRUE(by_index.ok());
  EXPECT_EQ(by_index->env, std::vector<std::string>{"NVIDIA_VISIBLE_DEVICES=void"});
  // No GPUs, or no spec of the kind: nothing to apply.
  EXPECT_TRUE(r.EditsForGpus({}, uuids_)->empty());
  EXPECT_TRUE(r.EditsForGpus({0}, uuids_, "example.com/fpga")->empty());
}

TEST_F(CdiRegistryTest, ABrokenSpecIsReportedAndTheOthersStillServe) {
  Write("etc/nvidia.yaml", NvidiaSpec());
  Write("etc/broken.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [{name: \"2\", containerEdits: {env: [X]}}]\n");
  Write("etc/garbage.json", "{\"cdiVersion\": ");
  CdiRegistry r = Registry();
  auto s = r.Refresh();
  EXPECT_EQ(s.loaded.size(), 1u);
  EXPECT_EQ(s.problems, (std::vector<std::string>{
                            root_ + "/etc/broken.yaml: devices[0].containerEdits.env[0]: \"X\" is not NAME=VALUE (ignored)",
                            root_ + "/etc/garbage.json: spec: not valid YAML or JSON: line 1, column 1: end of map flow not found (ignored)"}));
  EXPECT_TRUE(r.EditsForGpus({1}, uuids_).ok());
  auto two = r.EditsForGpus({2}, {});
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().message(), fmt::format("CDI: no nvidia.com/gpu device for GPU 2 in the specs of {0}/etc, {0}/run "
                                                "(regenerate them: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml)",
                                                root_));
}

TEST_F(CdiRegistryTest, ALaterDirWinsAndEqualPrioritiesConflict) {
  Write("etc/nvidia.yaml", NvidiaSpec());
  Write("run/override.yaml", With("{name: \"1\", containerEdits: {env: [FROM=run], deviceNodes: [{path: /dev/nvidia1, hostPath: /dev/null}]}}"));
  CdiRegistry r = Registry();
  auto e = r.EditsForGpus({1}, {});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->env, std::vector<std::string>{"FROM=run"});  // and none of etc's spec-wide edits
  EXPECT_EQ(e->specs, std::vector<std::string>{root_ + "/run/override.yaml"});
  // A second spec in the same dir naming GPU 1: neither is used, and it says so.
  Write("run/other.yaml", With("{name: \"1\", containerEdits: {env: [FROM=other]}}"));
  auto s = r.Refresh();
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0], fmt::format("nvidia.com/gpu=1: named by both {0}/run/other.yaml and {0}/run/override.yaml (neither used)", root_));
  EXPECT_FALSE(r.EditsForGpus({1}, {}).ok());
  // Changed files are read again: the conflict goes away with the file.
  std::filesystem::remove(root_ + "/run/other.yaml");
  Write("run/override.yaml", With("{name: \"1\", containerEdits: {env: [FROM=run-v2]}}"));
  e = r.EditsForGpus({1}, {});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->env, std::vector<std::string>{"FROM=run-v2"});
}

TEST_F(CdiRegistryTest, ADeviceThatIsAnotherGpusNodeOrMissingIsRefused) {
  // Index names that do not follow the device minors would hand over another task's GPU.
  Write("etc/nvidia.yaml", With("{name: \"1\", containerEdits: {deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/null}]}}"));
  CdiRegistry r = Registry();
  auto e = r.EditsForGpus({1}, {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), fmt::format("CDI: nvidia.com/gpu=1 ({}/etc/nvidia.yaml) is /dev/nvidia0, not GPU 1's /dev/nvidia1", root_));
  // Nor may the container's /dev/nvidia1 be made from another GPU's host node.
  Write("etc/nvidia.yaml", With("{name: \"1\", containerEdits: {deviceNodes: [{path: /dev/nvidia1, hostPath: /dev/nvidia3}]}}"));
  e = r.EditsForGpus({1}, {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), fmt::format("CDI: nvidia.com/gpu=1 ({}/etc/nvidia.yaml) is /dev/nvidia3, not GPU 1's /dev/nvidia1", root_));
  Write("etc/nvidia.yaml", With("{name: \"1\", containerEdits: {deviceNodes: [{path: /dev/nvidia1, hostPath: " + root_ + "/gone}]}}"));
  e = r.EditsForGpus({1}, {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "CDI device node " + root_ + "/gone: No such file or directory");
}

TEST(CdiResolve, TypeAndNumbersComeFromTheHostUnlessGiven) {
  CdiEdits e;
  e.device_nodes = {{.path = "/dev/x", .host_path = "/dev/null"},
                    {.path = "/dev/y", .type = "c", .major = 195, .minor = 7},
                    {.path = "/dev/z", .host_path = "/dev/null", .type = "b"}};
  Status st = ResolveCdiDeviceNodes(&e);
  EXPECT_EQ(st.message(), "CDI device node /dev/null: the spec says type b, the host's is c");
  e.device_nodes.pop_back();
  ASSERT_TRUE(ResolveCdiDeviceNodes(&e).ok());
  EXPECT_EQ(e.device_nodes[0].type, "c");
  EXPECT_EQ(e.device_nodes[0].major, 1);
  EXPECT_EQ(e.device_nodes[1].major, 195);  // taken at its word: /dev/y need not exist here
  EXPECT_EQ(e.device_nodes[1].minor, 7);
}

}  // namespace
}  // namespace ringmaster::agent
