#include "cli/registry.h"

#include <termios.h>
#include <unistd.h>

#include <iostream>

#include <fmt/format.h>

#include "cli/output.h"
#include "common/strings.h"

namespace ringmaster::cli {

using nlohmann::json;

int RegistryLogin(const Connection& c, const std::string& registry, const std::string& username, bool site) {
  if (username.empty()) Die("registry login: --username is required");
  std::string password;
  if (isatty(STDIN_FILENO)) {
    // Typed at a terminal: not echoed.
    std::cerr << fmt::format("password for {} at {}: ", username, registry) << std::flush;
    termios old {};
    const bool quiet = tcgetattr(STDIN_FILENO, &old) == 0;
    if (quiet) {
      termios no_echo = old;
      no_echo.c_lflag &= ~static_cast<tcflag_t>(ECHO);
      tcsetattr(STDIN_FILENO, TCSANOW, &no_echo);
    }
    std::getline(std::cin, password);
    if (quiet) tcsetattr(STDIN_FILENO, TCSANOW, &old);
    std::cerr << "\n";
  } else {
    std::getline(std::cin, password);
  }
  if (!password.empty() && password.back() == '\r') password.pop_back();
  if (password.empty()) Die("registry login: no password on stdin (pipe it in: echo \"$PW\" | ringmaster registry login ...)");
  client::ApiClient api = Connect(c);
  json r = Must(api.Post("/api/v1/registry-logins",
                         {{"registry", registry}, {"username", username}, {"password", password}, {"site", site}}));
  std::cerr << fmt::format("{} login to {} as {} kept on the server (sealed); jobs of {} pull with it\n",
                           site ? "the site's" : "your", r.value("registry", registry), username,
                           site ? "every user without a login of their own" : "yours");
  return 0;
}

int RegistryLogout(const Connection& c, const std::string& registry, bool site) {
  client::ApiClient api = Connect(c);
  json r = Must(api.Delete("/api/v1/registry-logins/" + PercentEncode(registry, false) + (site ? "?site=1" : "")));
  std::cerr << fmt::format("{} login to {} removed\n", site ? "the site's" : "your", r.value("registry", registry));
  return 0;
}

int RegistryLs(const Connection& c, bool as_json) {
  client::ApiClient api = Connect(c);
  json r = Must(api.Get("/api/v1/registry-logins"));
  if (as_json) {
    std::cout << r.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{:<32} {:<20} {:<6} {}\n", "REGISTRY", "USERNAME", "WHOSE", "UPDATED");
  for (const auto& l : r.value("logins", json::array())) {
    std::cout << fmt::format("{:<32} {:<20} {:<6} {}\n", l.value("registry", ""), l.value("username", ""),
                             l.value("site", false) ? "site" : "yours", l.value("updated_at", ""));
  }
  return 0;
}

}  // namespace ringmaster::cli
