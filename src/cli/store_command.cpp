// `allot store copy`: moves a server's state from its SQLite file into PostgreSQL
// (src/store/store_copy.h), for the move from `allot up` or a one-file server to production.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "store/open_store.h"
#include "store/store_copy.h"

namespace allot::cli {
namespace {

const CommandSpec& copy_spec() {
  static const CommandSpec spec{
      "store copy",
      "--from sqlite:PATH --to postgres://... [--force]",
      "Copies every table of a SQLite store into a PostgreSQL database, in one transaction,\n"
      "checking each table's row count before it commits. Both schemas are brought to this\n"
      "build's version first. Stop the server before: what it writes afterwards is not copied.\n"
      "A target that holds any row is refused unless --force.",
      {{"from", "sqlite:PATH", "the SQLite store (a path alone is taken as sqlite:PATH)"},
       {"to", "URI", "the PostgreSQL database (a libpq URI: postgres://user@host:port/db?...)"},
       {"force", "", "empty every table of the target first (its rows are lost)"}},
      0,
      0,
      false,
      "allot store copy --from sqlite:/var/lib/allot/allot.db "
      "--to 'postgresql://allot@db1.lab/allot'"};
  return spec;
}

void usage(FILE* out) {
  std::fprintf(out,
               "usage: allot store copy --from sqlite:PATH --to postgres://... [--force]\n"
               "\n"
               "The server's store (docs/store.md):\n"
               "  copy     copy a SQLite store into PostgreSQL (allot store copy --help)\n");
}

}  // namespace

int store_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    usage(args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "copy") {
    std::fprintf(stderr, "allot store: unknown subcommand '%s' (copy)\n", args[0].c_str());
    return 2;
  }
  args.erase(args.begin());
  const auto& spec = copy_spec();
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(help_text(spec).c_str(), stdout);
      return 0;
    }
  }
  auto parsed = parse_flags(spec, args);
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "allot: %s\n", parsed.error.c_str());
    return 2;
  }
  std::string from = parsed.args.get("from");
  const std::string to = parsed.args.get("to");
  if (from.rfind("sqlite:", 0) == 0) from = from.substr(7);
  if (from.empty()) {
    std::fprintf(stderr, "allot store copy: --from: the SQLite store to copy (sqlite:PATH)\n");
    return 2;
  }
  if (!store::is_postgres_spec(to)) {
    std::fprintf(stderr,
                 "allot store copy: --to: a PostgreSQL URI (postgres://... or postgresql://...)\n");
    return 2;
  }
  store::CopyOptions opts;
  opts.force = parsed.args.has("force");
  auto r = store::copy_sqlite_to_postgres(from, to, opts);
  if (!r.ok()) {
    std::fprintf(stderr, "allot store copy: %s: %s\n", r.error().field.c_str(),
                 r.error().reason.c_str());
    return 1;
  }
  std::int64_t total = 0;
  for (const auto& [table, rows] : r.value().tables) {
    std::printf("%-16s %lld rows\n", table.c_str(), static_cast<long long>(rows));
    total += rows;
  }
  std::printf("copied %lld rows in %zu tables (schema version %d), counts checked\n",
              static_cast<long long>(total), r.value().tables.size(), r.value().schema_version);
  return 0;
}

}  // namespace allot::cli
