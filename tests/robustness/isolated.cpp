#include "isolated.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>

namespace customop::testing {

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kResult: return "result";
    case Outcome::kCheckedError: return "checked error";
    case Outcome::kBadError: return "bad error";
    case Outcome::kWrongResult: return "wrong result";
    case Outcome::kCrash: return "crash";
    case Outcome::kHang: return "hang";
  }
  return "?";
}

namespace {

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

Verdict run_isolated(const std::function<Verdict()>& body, std::chrono::seconds limit) {
  int fds[2];
  if (::pipe(fds) != 0) return {Outcome::kCrash, std::string("pipe: ") + std::strerror(errno)};
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {Outcome::kCrash, std::string("fork: ") + std::strerror(errno)};
  }
  if (pid == 0) {
    ::close(fds[0]);
    Verdict v;
    try {
      v = body();
    } catch (const std::exception& e) {
      v = {Outcome::kBadError, std::string("unexpected exception: ") + e.what()};
    } catch (...) {
      v = {Outcome::kBadError, "unexpected exception of unknown type"};
    }
    write_all(fds[1],
              std::string(1, static_cast<char>('0' + static_cast<int>(v.outcome))) + v.detail);
    ::close(fds[1]);
    ::_exit(0);  // no static destructors, no gtest teardown in the child
  }
  ::close(fds[1]);
  std::string message;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;  // the deadline check above ends the loop
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child closed its end (reported, or died)
    message.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return {Outcome::kHang, "still running after " + std::to_string(limit.count()) + " s"};
  }
  if (WIFSIGNALED(status)) {
    return {Outcome::kCrash, "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                                 strsignal(WTERMSIG(status)) + ")"};
  }
  if (message.empty() || WEXITSTATUS(status) != 0) {
    return {Outcome::kCrash, "exit status " + std::to_string(WEXITSTATUS(status)) +
                                 " without a verdict (see stderr)"};
  }
  const int code = message[0] - '0';
  if (code < 0 || code > static_cast<int>(Outcome::kHang)) {
    return {Outcome::kCrash, "garbled verdict from the child"};
  }
  return {static_cast<Outcome>(code), message.substr(1)};
}

}  // namespace customop::testing
