// Subcommands of `hla` register themselves: each cli/cmd_*.cpp defines one with a static
// CommandRegistrar, so adding a subcommand touches only its own file.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace hla::cli {

using CommandAdder = std::function<void(CLI::App&)>;

inline std::vector<CommandAdder>& command_adders() {
  static std::vector<CommandAdder> adders;
  return adders;
}

struct CommandRegistrar {
  explicit CommandRegistrar(CommandAdder add) { command_adders().push_back(std::move(add)); }
};

}  // namespace hla::cli
