// Opens the store a server is told to use: "sqlite:PATH" (the embedded default) or a libpq URI
// "postgres://..." / "postgresql://..." (the production store). A bad spec is an error naming
// the field "store".
#pragma once

#include <memory>
#include <string>

#include "store/store.h"

namespace allot::store {

core::Result<std::unique_ptr<Store>> open_store(const std::string& spec);

// True if `spec` names a PostgreSQL database (postgres:// or postgresql://).
bool is_postgres_spec(const std::string& spec);

}  // namespace allot::store
