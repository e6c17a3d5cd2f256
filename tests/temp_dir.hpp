// A fresh (emptied) folder under the system temp dir, unique to this test process: tests that write
// sweep outputs start from nothing and do not collide with a concurrent run.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

inline std::filesystem::path fresh_dir(const std::string& name) {
  std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("hla-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}
