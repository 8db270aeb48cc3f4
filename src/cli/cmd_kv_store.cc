// tessera kv-store stats|verify|gc DIR: look after a --kv-store directory
// (kvstore/disk_store.h) while servers use it or not. Prints JSON; verify
// exits 1 when a record fails its check.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "kvstore/disk_store.h"

namespace tessera::cli {
namespace {

struct KvStoreOptions {
  std::string action;
  std::string dir;
  bool drop = false;
  std::string max_bytes;
  double temp_age = 60.0;
};

int run_kv_store(const KvStoreOptions& o) {
  kvstore::DiskStore store(o.dir, 0);
  nlohmann::json out = {{"dir", o.dir}, {"action", o.action}};
  int rc = 0;
  if (o.action == "stats") {
    const kvstore::DiskUsage u = store.usage();
    out["records"] = u.records;
    out["bytes"] = u.bytes;
    out["temp_files"] = u.temp_files;
  } else if (o.action == "verify") {
    const kvstore::VerifyReport r = store.verify(o.drop);
    out["records"] = r.records;
    out["bad"] = nlohmann::json::array();
    for (const auto& [path, why] : r.bad) out["bad"].push_back({{"path", path}, {"why", why}});
    out["dropped"] = o.drop ? static_cast<int64_t>(r.bad.size()) : 0;
    rc = r.bad.empty() ? 0 : 1;
  } else {
    TESSERA_CHECK(!o.max_bytes.empty(), kInvalidArgument, "gc needs --max-bytes");
    out["deleted"] = store.trim(static_cast<int64_t>(parse_bytes(o.max_bytes)), o.temp_age);
    const kvstore::DiskUsage u = store.usage();
    out["records"] = u.records;
    out["bytes"] = u.bytes;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return rc;
}

TESSERA_COMMAND("kv-store", "Inspect, check or trim a --kv-store directory: stats|verify|gc DIR", [](CLI::App& sub) {
  auto o = std::make_shared<KvStoreOptions>();
  sub.add_option("action", o->action, "stats, verify or gc")->required()->check(CLI::IsMember({"stats", "verify", "gc"}));
  sub.add_option("dir", o->dir, "The directory given to --kv-store")->required();
  sub.add_flag("--delete", o->drop, "verify: delete the records that fail");
  sub.add_option("--max-bytes", o->max_bytes, "gc: keep at most this many bytes (least recently used go first)");
  sub.add_option("--temp-age", o->temp_age, "gc: delete unfinished writes older than this (seconds)")->capture_default_str();
  return [o] { return run_kv_store(*o); };
});

}  // namespace
}  // namespace tessera::cli
