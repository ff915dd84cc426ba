// tessera: one binary, subcommands in the HashiCorp style (`tessera sim openb ...`).
#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/agent_command.h"
#include "cli/audit_command.h"
#include "cli/client_commands.h"
#include "cli/secrets_commands.h"
#include "cli/server_command.h"
#include "cli/sim_command.h"
#include "cli/tls_command.h"

namespace {

constexpr const char* kVersion = "tessera 0.1.0";

// HashiCorp spelling: `-config=FILE` is `--config=FILE` (CLI11 wants two dashes for long names).
// Arguments after `--` are a workload's command and are left as they are.
std::vector<std::string> hashicorpArgs(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    for (const char* name :
         {"-config", "-format", "-address", "-key-shares", "-key-threshold", "-validate"}) {
      const std::string n(name);
      if (args[i] == n || args[i].rfind(n + "=", 0) == 0) {
        args[i] = "-" + args[i];
      }
    }
  }
  return args;
}

// CLI11 lets an option that holds a list take every word after it, and then eats a `--` that
// ends them: `run t --secret-kv a -- sh -c x` lost its `--` and failed on `-c`. Each such
// option takes one value per use instead (`--secret-kv a --secret-kv b`, or `a,b` where a
// delimiter is set), so `--` always starts the command. Positionals keep their lists.
void oneValuePerFlag(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (!opt->get_positional() && opt->get_items_expected_max() > 1) {
      opt->allow_extra_args(false);
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    oneValuePerFlag(*sub);
  }
}

// Every command path ("token create") with the words that may follow it: its subcommands and
// its long options.
void commandWords(const CLI::App& app, const std::string& path,
                  std::map<std::string, std::set<std::string>>& out) {
  std::set<std::string>& words = out[path];
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& name : opt->get_lnames()) {
      words.insert("--" + name);
    }
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    words.insert(sub->get_name());
    commandWords(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
  }
}

// A bash completion function generated from the commands themselves, so it never lags them.
std::string bashCompletion(const CLI::App& app) {
  std::map<std::string, std::set<std::string>> words;
  commandWords(app, "", words);
  std::string known;
  std::string cases;
  for (const auto& [path, list] : words) {
    std::string joined;
    for (const std::string& w : list) {
      joined += (joined.empty() ? "" : " ") + w;
    }
    cases += "    \"" + path + "\") words=\"" + joined + "\" ;;\n";
    if (!path.empty()) {
      known += (known.empty() ? "" : "|") + ("\"" + path + "\"");
    }
  }
  return "# bash completion for tessera: source <(tessera completion bash)\n"
         "_tessera_command() {\n"
         "  case \"$1\" in\n"
         "    " +
         known +
         ") return 0 ;;\n"
         "  esac\n"
         "  return 1\n"
         "}\n"
         "_tessera() {\n"
         "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" path=\"\" next w i words=\"\"\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    w=\"${COMP_WORDS[i]}\"\n"
         "    if [[ \"$w\" == \"--\" ]]; then return 0; fi  # The workload's own command.\n"
         "    next=\"${path:+$path }$w\"\n"
         "    if _tessera_command \"$next\"; then path=\"$next\"; fi\n"
         "  done\n"
         "  case \"$path\" in\n" +
         cases +
         "  esac\n"
         "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
         "}\n"
         "complete -o default -F _tessera tessera\n";
}

void addVersionAndCompletion(CLI::App& app, int* rc) {
  CLI::App* version = app.add_subcommand("version", "Print the version (as --version)");
  version->callback([rc] {
    std::cout << kVersion << "\n";
    *rc = 0;
  });
  auto shell = std::make_shared<std::string>();
  CLI::App* completion = app.add_subcommand(
      "completion", "Print a shell completion script: source <(tessera completion bash)");
  completion->add_option("SHELL", *shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  completion->footer(
      "bash: add `source <(tessera completion bash)` to ~/.bashrc. zsh: add `source <(tessera "
      "completion zsh)` to ~/.zshrc (it uses zsh's bashcompinit).");
  completion->callback([&app, shell, rc] {
    if (*shell == "zsh") {
      std::cout << "#compdef tessera\n"
                   "autoload -U +X compinit && compinit\n"
                   "autoload -U +X bashcompinit && bashcompinit\n";
    }
    std::cout << bashCompletion(app);
    *rc = 0;
  });
}

int run(int argc, char** argv) {
  CLI::App app{
      "Tessera shares GPU clusters between teams: one scheduler, a virtual cluster per tenant.",
      "tessera"};
  app.require_subcommand(1);
  app.set_version_flag("--version", kVersion);
  int rc = 0;
  tessera::cli::addSimCommand(app, &rc);
  tessera::cli::addAuditCommand(app, &rc);
  tessera::cli::addTlsCommand(app, &rc);
  tessera::cli::addServerCommands(app, &rc);
  tessera::cli::addAgentCommands(app, &rc);
  tessera::cli::addClientCommands(app, &rc);
  tessera::cli::addSecretsCommands(app, &rc);
  tessera::cli::addAuditTail(*app.get_subcommand("audit"), &rc);
  addVersionAndCompletion(app, &rc);
  oneValuePerFlag(app);
  try {
    std::vector<std::string> args = hashicorpArgs(argc, argv);
    std::vector<char*> ptrs;
    ptrs.reserve(args.size());
    for (std::string& a : args) {
      ptrs.push_back(a.data());
    }
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    // Usage errors exit 2, like bad input; --help and --version exit 0.
    return code == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (...) {
    std::cerr << "error: unexpected internal error\n";
    return 1;
  }
}
