// The dashboard's files (web/ in the source tree), compiled into the binary so that the server
// works on an air-gapped cluster with nothing to install beside it; and how they are served.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace allot::server {

struct WebAsset {
  std::string_view path;  // "/index.html", "/app.js", ... (relative to web/)
  std::string_view body;
};

// Every file under web/, by path (generated at build time: cmake/embed_web.cmake).
std::span<const WebAsset> web_assets();

// The Content-Type for a file name, from its extension; application/octet-stream when unknown.
std::string_view content_type_for(std::string_view path);

// What GET `path` answers: an asset by its path, or, for a page of the app ("/", "/queue",
// "/jobs/17"), the app's index.html; nullopt for a missing file (a path whose last segment has a
// dot: a stale asset name is a 404, not the app). API paths never come here.
struct WebAnswer {
  const WebAsset* asset = nullptr;
  std::string_view content_type;
  std::string etag;  // quoted; changes with the bytes
};
std::optional<WebAnswer> web_lookup(std::string_view path);

// The headers every dashboard answer carries: a Content-Security-Policy that lets the page load
// only its own scripts, styles and API (no inline script, nothing from elsewhere, no framing).
inline constexpr std::string_view kDashboardCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace allot::server
