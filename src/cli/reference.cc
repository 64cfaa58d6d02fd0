#include "cli/reference.h"

#include <string>
#include <vector>

namespace ringmaster::cli {

namespace {

std::vector<const CLI::App*> Visible(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); });
}

// GitHub's anchor of a heading "ringmaster files put": lower case, spaces as '-'.
std::string Anchor(const std::string& path) {
  std::string a;
  for (char ch : path) a += ch == ' ' ? '-' : ch;
  return a;
}

void Index(const CLI::App& app, const std::string& path, int depth, std::ostream& out) {
  for (const CLI::App* sub : Visible(app)) {
    const std::string p = path + " " + sub->get_name();
    out << std::string(2 * depth, ' ') << "- [`" << p << "`](#" << Anchor(p) << ") — " << sub->get_description()
        << "\n";
    Index(*sub, p, depth + 1, out);
  }
}

void Sections(const CLI::App& app, const std::string& path, std::ostream& out) {
  for (const CLI::App* sub : Visible(app)) {
    const std::string p = path + " " + sub->get_name();
    // Built by the formatter itself: App::help() would follow the parsed subcommand instead.
    out << "\n## " << p << "\n\n```\n"
        << sub->get_formatter()->make_help(sub, p, CLI::AppFormatMode::Normal) << "```\n";
    Sections(*sub, p, out);
  }
}

}  // namespace

void WriteCliReference(const CLI::App& app, std::ostream& out) {
  const std::string root = "ringmaster";
  out << "# Command-line reference\n\n"
         "<!-- Generated from the CLI's own help by `make cli-docs` (`ringmaster cli-reference > docs/cli.md`):\n"
         "     edit the help strings in src/cli/, not this page. -->\n\n"
         "Every `ringmaster` command with the help it prints (`ringmaster COMMAND --help`). Global\n"
         "options go before or after the command. How the CLI finds its server and token is in the\n"
         "[README](../README.md#use-it).\n\n"
         "## ringmaster\n\n```\n"
      << app.get_formatter()->make_help(&app, root, CLI::AppFormatMode::Normal) << "```\n\n"
      << "Commands:\n\n";
  Index(app, root, 0, out);
  Sections(app, root, out);
}

}  // namespace ringmaster::cli
