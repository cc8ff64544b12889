#include "store/open_store.h"

#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace allot::store {

bool is_postgres_spec(const std::string& spec) {
  return spec.starts_with("postgres://") || spec.starts_with("postgresql://");
}

core::Result<std::unique_ptr<Store>> open_store(const std::string& spec) {
  if (is_postgres_spec(spec)) return open_postgres(spec);
  if (spec.starts_with("sqlite:")) {
    const auto path = spec.substr(7);
    if (path.empty()) return core::Error{"store", "sqlite: needs a path (sqlite:PATH)"};
    return open_sqlite(path);
  }
  return core::Error{"store",
                     "expected sqlite:PATH or postgres://... (a libpq URI), not '" + spec + "'"};
}

}  // namespace allot::store
