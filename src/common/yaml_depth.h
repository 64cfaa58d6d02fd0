// YamlDepthLimit: a yaml-cpp event handler for a first pass over text from
// outside, before YAML::Load builds it. yaml-cpp's parser recurses once per
// nested collection; this stops it at `limit` levels by throwing YamlTooDeep.
// Run it with YAML::Parser::HandleNextDocument (twice, to refuse a second
// document). Header-only: its users link yaml-cpp. One per parse.
#pragma once

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/mark.h>

#include <string>

namespace ringmaster {

struct YamlTooDeep {
  int line;  // 1-based
};

class YamlDepthLimit : public YAML::EventHandler {
 public:
  explicit YamlDepthLimit(int limit) : limit_(limit) {}
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    Enter(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  // Throwing is the only way to stop yaml-cpp's parser before it goes deeper.
  void Enter(const YAML::Mark& mark) {
    if (++depth_ > limit_) throw YamlTooDeep{mark.line + 1};
  }
  const int limit_;
  int depth_ = 0;
};

}  // namespace ringmaster
