#include "sharding.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

extern char** environ;

namespace customop::gradcheck::cli {

int run_sharding_check(const std::string& op_glob, const std::vector<std::string>& libraries,
                       const std::string& json_path) {
  const char* env_python = std::getenv("CUSTOMOP_PYTHON");
  const std::string python = env_python != nullptr && *env_python ? env_python : "python3";
  std::vector<std::string> args = {python, "-m", "customop._sharding_main", "--op", op_glob};
  for (const auto& lib : libraries) {
    args.push_back("--load");
    args.push_back(lib);
  }
  if (!json_path.empty()) {
    args.push_back("--json");
    args.push_back(json_path);
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ);
  if (err != 0) {
    std::cerr << "customop-gradcheck --sharding: cannot start '" << python
              << "' (set CUSTOMOP_PYTHON to a Python with torch and the customop package): "
              << std::strerror(err) << "\n";
    return 3;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 3;
  }
  if (WIFEXITED(status)) {
    const int rc = WEXITSTATUS(status);
    if (rc == 0 || rc == 2) return rc;
    if (rc == 3) return 1;  // a rule failed
    std::cerr << "customop-gradcheck --sharding: the sharding check could not run ('" << python
              << " -m customop._sharding_main' exited " << rc
              << "): CUSTOMOP_PYTHON must name a Python that imports torch and the customop "
                 "package\n";
    return 3;
  }
  std::cerr << "customop-gradcheck --sharding: '" << python << "' ended by signal "
            << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << "\n";
  return 1;
}

}  // namespace customop::gradcheck::cli
