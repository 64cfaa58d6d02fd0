// The agent's side of registries' images: the login a task's image needs,
// asked of the server only when the registry must be contacted.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/agent.h"

namespace ringmaster::agent {

StatusOr<RegistryImages::Ready> Agent::PullRegistryImage(const TaskRef& ref, const std::string& image,
                                                         const std::string& runtime, const std::function<bool()>& stopped) {
  // The job owner's login to the image's registry (or the site's), for this
  // pull only: the server hands it to the agent of the task's node alone.
  // Users' own images come from the server itself, as its own registry: the
  // agent presents its own token (the server lets it read only what its
  // tasks run).
  if (auto at = ParsePinnedImage(image); at.ok() && at->registry == registry_images_.options().server_registry) {
    const registry::Credentials own{"ringmaster", options_.token};
    return registry_images_.Ensure(image, [own]() -> StatusOr<registry::Credentials> { return own; }, runtime, stopped);
  }
  const auto login = [this, &ref]() -> StatusOr<registry::Credentials> {
    registry::Credentials c;
    RM_ASSIGN_OR_RETURN(nlohmann::json j, api_.Get(fmt::format("/api/v1/agent/tasks/{}/registry-login?attempt={}",
                                                                ref.task_id, ref.attempt),
                                                    {std::chrono::seconds(30)}));
    if (j.is_object() && j.contains("username")) {
      c.username = j.value("username", "");
      c.password = j.value("password", "");
    }
    return c;
  };
  return registry_images_.Ensure(image, login, runtime, stopped);
}

}  // namespace ringmaster::agent
