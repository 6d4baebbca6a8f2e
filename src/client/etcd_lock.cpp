// An etcd lock whose key revision is the token (see etcd_lock.hpp): a key put
// under an etcd lease if it is absent, in one transaction,
//   compare create_revision(<key>) == 0  ->  put <key> under the lease; range it
// and the key's create_revision as the fencing token.  The lease is kept
// alive every ttl / 3; a holder that stops sending keepalives loses the lease
// after its TTL, and etcd deletes the key with it.
//
// Why a revision is a sound token: etcd's revision is one counter for the
// whole key space, raised by every write and never reused.  The next
// holder's put comes after the deletion of the previous holder's key (the
// lease's expiry is itself a write), so its create_revision is strictly
// greater.  And etcd only answers once the write is committed to a majority
// of its members' logs (fsynced), so the revision survives restarts and
// leader changes: unlike a Redis counter, nothing hands out a revision twice.
//
// Client: etcd's v3 JSON gateway (POST /v3/lease/grant, /v3/kv/txn, ...)
// over libcurl, rather than etcdctl as a subprocess: one process per lock
// operation would be a fork+exec per keepalive, every ttl / 3, and parsing
// etcdctl's output is no simpler than parsing the gateway's JSON.  The
// gateway speaks proto3 JSON: keys and values in base64, 64-bit integers as
// strings, and fields at their default (0, false, empty) left out.
#include <curl/curl.h>

#include <charconv>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "busy_retry.hpp"
#include "pg_fencing/etcd_lock.hpp"

namespace pg_fencing::client {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Bound on one request while acquiring and releasing; keepalives get what is
// left before the lock's deadline, if that is less.
constexpr milliseconds kRequestTimeout{2000};
// gRPC status NOT_FOUND, as the gateway reports it ("requested lease not found").
constexpr int kGrpcNotFound = 5;

std::string Base64(const std::string &bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string encoded;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned n = static_cast<unsigned char>(bytes[i]) << 16 |
                       static_cast<unsigned char>(bytes[i + 1]) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (const int shift : {18, 12, 6, 0}) encoded += kAlphabet[(n >> shift) & 63];
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const unsigned n = static_cast<unsigned char>(bytes[i]) << 16 |
                       (two ? static_cast<unsigned char>(bytes[i + 1]) << 8 : 0u);
    encoded += kAlphabet[(n >> 18) & 63];
    encoded += kAlphabet[(n >> 12) & 63];
    encoded += two ? kAlphabet[(n >> 6) & 63] : '=';
    encoded += '=';
  }
  return encoded;
}

// A proto3 int64 field: a decimal string, or absent for 0.
long long Int64Field(const json &object, const char *name) {
  const auto field = object.find(name);
  if (field == object.end()) return 0;
  if (field->is_number_integer()) return field->get<long long>();
  const std::string text = field->get<std::string>();
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw std::runtime_error(std::string("etcd sent a malformed ") + name + ": \"" + text + "\"");
  }
  return value;
}

// An error the gateway reported in its answer.
class EtcdError : public std::runtime_error {
 public:
  EtcdError(const std::string &what, int code) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// One libcurl handle, used by one thread at a time.
class EtcdClient {
 public:
  explicit EtcdClient(std::string url) : url_(std::move(url)) {
    // Not thread-safe, so the first client does it, on the thread that
    // acquires, before any heartbeat thread exists.
    static std::once_flag global_init;
    std::call_once(global_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    curl_ = curl_easy_init();
    if (curl_ == nullptr) throw std::runtime_error("curl_easy_init failed");
    headers_ = curl_slist_append(nullptr, "Content-Type: application/json");
    if (headers_ == nullptr) {
      curl_easy_cleanup(curl_);
      throw std::bad_alloc();
    }
  }
  ~EtcdClient() {
    curl_slist_free_all(headers_);
    curl_easy_cleanup(curl_);
  }
  EtcdClient(const EtcdClient &) = delete;
  EtcdClient &operator=(const EtcdClient &) = delete;

  const std::string &url() const { return url_; }

  // POSTs body to the gateway's path and returns its answer.  Throws
  // EtcdError when the answer is an error, std::runtime_error when there is
  // no answer in time.
  json Post(const std::string &path, const json &body, milliseconds timeout) {
    const std::string request = body.dump();
    const std::string target = url_ + path;
    std::string response;
    char error_text[CURL_ERROR_SIZE] = "";
    curl_easy_reset(curl_);
    curl_easy_setopt(curl_, CURLOPT_URL, target.c_str());
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, request.c_str());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(request.size()));
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(std::max<long long>(timeout.count(), 1)));
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
    curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, error_text);
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &EtcdClient::Append);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &response);
    const CURLcode result = curl_easy_perform(curl_);
    if (result != CURLE_OK) {
      throw std::runtime_error("etcd at " + url_ + ": POST " + path + ": " +
                               (*error_text ? error_text : curl_easy_strerror(result)));
    }
    const json answer = json::parse(response, nullptr, /*allow_exceptions=*/false);
    if (answer.is_discarded() || !answer.is_object()) {
      throw std::runtime_error("etcd at " + url_ + ": POST " + path +
                               ": not a JSON object: " + response.substr(0, 200));
    }
    // Unary calls answer {"error": "...", "code": N}, streaming ones
    // {"error": {"grpc_code": N, "message": "..."}}.
    if (const auto error = answer.find("error"); error != answer.end()) {
      const bool nested = error->is_object();
      const int code = nested ? error->value("grpc_code", 0) : answer.value("code", 0);
      const std::string message = nested ? error->value("message", "") : error->get<std::string>();
      throw EtcdError("etcd at " + url_ + ": POST " + path + ": " + message, code);
    }
    return answer;
  }

 private:
  static std::size_t Append(char *data, std::size_t size, std::size_t count, void *response) {
    static_cast<std::string *>(response)->append(data, size * count);
    return size * count;
  }

  const std::string url_;
  CURL *curl_ = nullptr;
  curl_slist *headers_ = nullptr;
};

bool KeyExists(EtcdClient &etcd, const std::string &key) {
  const json range = etcd.Post("/v3/kv/range", {{"key", Base64(key)}}, kRequestTimeout);
  return Int64Field(range, "count") > 0;
}

// Ends the lease, and with it the key put under it; false if it was gone.
bool Revoke(EtcdClient &etcd, const std::string &lease) {
  try {
    etcd.Post("/v3/lease/revoke", {{"ID", lease}}, kRequestTimeout);
    return true;
  } catch (const EtcdError &error) {
    if (error.code() == kGrpcNotFound) return false;
    throw;
  }
}

class EtcdLockSession final : public LockSession {
 public:
  EtcdLockSession(std::unique_ptr<EtcdClient> etcd, std::string key, std::string lease)
      : etcd_(std::move(etcd)), key_(std::move(key)), lease_(std::move(lease)) {}

  std::string Describe() const override { return "etcd key " + key_ + " under lease " + lease_; }

  bool Renew(milliseconds budget) override {
    // The gateway maps the keepalive stream to one request and one answer.
    // An expired lease is answered with a TTL of 0 (left out), not an error.
    const json answer =
        etcd_->Post("/v3/lease/keepalive", {{"ID", lease_}}, std::min(budget, kRequestTimeout));
    return Int64Field(answer.value("result", json::object()), "TTL") > 0;
  }

  bool Release() override { return Revoke(*etcd_, lease_); }

 private:
  std::unique_ptr<EtcdClient> etcd_;
  const std::string key_;
  const std::string lease_;
};

// Puts key = holder under the lease if the key does not exist, and reads it
// back in the same transaction; its create_revision (the revision of this
// very transaction) is the token.  nullopt if the key existed.
std::optional<Token> PutIfAbsent(EtcdClient &etcd, const std::string &key, const std::string &lease,
                                 const std::string &holder) {
  const std::string key64 = Base64(key);
  const json absent = {{"target", "CREATE"}, {"key", key64}, {"create_revision", "0"}};
  const json put = {{"request_put", {{"key", key64}, {"value", Base64(holder)}, {"lease", lease}}}};
  const json read_back = {{"request_range", {{"key", key64}}}};
  const json txn = {{"compare", json::array({absent})}, {"success", json::array({put, read_back})}};
  const json answer = etcd.Post("/v3/kv/txn", txn, kRequestTimeout);
  if (!answer.value("succeeded", false)) return std::nullopt;
  const json &kvs = answer.at("responses").at(1).at("response_range").at("kvs");
  const Token token = Int64Field(kvs.at(0), "create_revision");
  if (token <= 0) throw std::runtime_error("etcd put " + key + " without a create_revision");
  return token;
}

}  // namespace

std::unique_ptr<RenewedLock> AcquireEtcdLock(const EtcdLockOptions &options) {
  const long long ttl_seconds = (options.ttl.count() + 999) / 1000;
  auto etcd = std::make_unique<EtcdClient>(options.url);
  const BusyRetry retry(options.wait, "etcd key " + options.key);
  for (;;) {
    // Granting a lease per attempt would be wasteful while the key is
    // plainly taken: look first.
    if (!KeyExists(*etcd, options.key)) {
      const Clock::time_point sent = Clock::now();
      const json grant = etcd->Post("/v3/lease/grant", {{"TTL", ttl_seconds}}, kRequestTimeout);
      const std::string lease = std::to_string(Int64Field(grant, "ID"));
      const long long granted_seconds = Int64Field(grant, "TTL");
      if (granted_seconds != ttl_seconds) {
        Revoke(*etcd, lease);
        throw std::runtime_error(
            "etcd at " + options.url + " granted a " + std::to_string(granted_seconds) +
            " s lease when asked for " + std::to_string(ttl_seconds) +
            " s: its minimum TTL is 1.5 x its election timeout, rounded up to whole seconds. "
            "Use a longer ttl, or start etcd with a shorter --election-timeout "
            "(demo/services.sh uses --heartbeat-interval 10 --election-timeout 100)");
      }
      if (const std::optional<Token> token =
              PutIfAbsent(*etcd, options.key, lease, options.holder)) {
        auto session = std::make_unique<EtcdLockSession>(std::move(etcd), options.key, lease);
        return std::make_unique<RenewedLock>(std::move(session), *token,
                                             std::chrono::seconds(granted_seconds), sent,
                                             options.on_lost);
      }
      Revoke(*etcd, lease);  // someone else put it first
    }
    retry.AfterBusy();
  }
}

void CheckEtcdReachable(const std::string &url) {
  EtcdClient etcd(url);
  etcd.Post("/v3/maintenance/status", json::object(), kRequestTimeout);
}

}  // namespace pg_fencing::client
