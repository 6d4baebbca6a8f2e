// See common.hpp.
#include "common.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace pg_fencing::stress {

namespace {

std::int64_t ClockNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

Stamp Now() {
  Stamp stamp;
  stamp.mono_ns = ClockNs(CLOCK_MONOTONIC);
  stamp.wall_us = ClockNs(CLOCK_REALTIME) / 1000;
  return stamp;
}

std::int64_t MonoMs() { return ClockNs(CLOCK_MONOTONIC) / 1000000; }

EventLog::EventLog(const std::string &path) {
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
}

EventLog::~EventLog() {
  if (fd_ >= 0) close(fd_);
}

void EventLog::Write(const std::string &fields, std::string_view msg) const {
  Write(Now(), fields, msg);
}

void EventLog::Write(const Stamp &stamp, const std::string &fields, std::string_view msg) const {
  std::string line = "mono=" + std::to_string(stamp.mono_ns) +
                     " wall=" + std::to_string(stamp.wall_us) + " " + fields;
  if (!msg.empty()) {
    line += " msg=";
    for (char c : msg) line += (c == '\n' || c == '\r') ? ' ' : c;
  }
  line += '\n';
  const char *p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere to report it; the checker sees the gap
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

Fields ParseFields(std::string_view line) {
  Fields fields;
  std::size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    if (pos >= line.size()) break;
    if (line.compare(pos, 4, "msg=") == 0) {
      fields.emplace("msg", std::string(line.substr(pos + 4)));
      break;
    }
    std::size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    const std::string_view word = line.substr(pos, end - pos);
    const std::size_t eq = word.find('=');
    if (eq != std::string_view::npos) {
      fields.emplace(std::string(word.substr(0, eq)), std::string(word.substr(eq + 1)));
    }
    pos = end;
  }
  return fields;
}

std::vector<std::string> Split(std::string_view s, char c) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = s.find(c, start);
    if (end == std::string_view::npos) {
      parts.emplace_back(s.substr(start));
      return parts;
    }
    parts.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
}

std::vector<std::string> CompleteLines(const std::string &text, long *truncated) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      // A process killed in the middle of a line; nothing after it.
      if (truncated) ++*truncated;
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::optional<std::string> Get(const Fields &fields, std::string_view key) {
  const auto it = fields.find(key);
  if (it == fields.end()) return std::nullopt;
  return it->second;
}

std::int64_t GetInt(const Fields &fields, std::string_view key, std::int64_t fallback) {
  const auto it = fields.find(key);
  if (it == fields.end() || it->second.empty()) return fallback;
  try {
    std::size_t used = 0;
    const long long value = std::stoll(it->second, &used);
    return used == it->second.size() ? value : fallback;
  } catch (const std::exception &) {
    return fallback;
  }
}

std::string FirstLine(std::string_view message) {
  std::string text(message);
  for (const char *prefix : {"ERROR:", "FATAL:"}) {
    if (text.rfind(prefix, 0) == 0) text.erase(0, std::strlen(prefix));
  }
  text.erase(0, std::min(text.find_first_not_of(' '), text.size()));
  text.erase(std::min(text.find('\n'), text.size()));
  return text;
}

std::string ReadFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteFile(const std::string &path, const std::string &contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << contents;
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
}

}  // namespace pg_fencing::stress
