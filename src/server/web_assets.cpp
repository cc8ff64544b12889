#include "server/web_assets.h"

#include <cstdint>
#include <cstdio>

namespace allot::server {

std::string_view content_type_for(std::string_view path) {
  struct Kind {
    std::string_view ext, type;
  };
  static constexpr Kind kinds[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".json", "application/json"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".txt", "text/plain; charset=utf-8"},
      {".woff2", "font/woff2"},
  };
  for (const auto& k : kinds) {
    if (path.size() >= k.ext.size() && path.substr(path.size() - k.ext.size()) == k.ext) {
      return k.type;
    }
  }
  return "application/octet-stream";
}

namespace {

// FNV-1a: an ETag needs only to change when the bytes do.
std::string etag_of(std::string_view body) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : body) h = (h ^ c) * 1099511628211ull;
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"%016llx\"", static_cast<unsigned long long>(h));
  return buf;
}

const WebAsset* find(std::string_view path) {
  for (const auto& a : web_assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

}  // namespace

std::optional<WebAnswer> web_lookup(std::string_view path) {
  const WebAsset* a = path == "/" ? nullptr : find(path);
  if (!a) {
    const auto last = path.substr(path.rfind('/') + 1);
    if (last.find('.') != std::string_view::npos) return std::nullopt;
    a = find("/index.html");
    if (!a) return std::nullopt;
  }
  return WebAnswer{a, content_type_for(a->path), etag_of(a->body)};
}

}  // namespace allot::server
