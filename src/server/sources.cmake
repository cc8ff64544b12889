# The server's sources: one list for the library (CMakeLists.txt here) and for the fuzz build
# (fuzz/CMakeLists.txt), which compiles them itself with its instrumentation. A new file of the
# server goes here only.
set(ALLOT_SERVER_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_agent.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_budgets.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_fields.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_jobs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_json.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_logs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_nodes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_tokens.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_usage.cpp
  ${CMAKE_CURRENT_LIST_DIR}/auth.cpp
  ${CMAKE_CURRENT_LIST_DIR}/controller.cpp
  ${CMAKE_CURRENT_LIST_DIR}/controller_budgets.cpp
  ${CMAKE_CURRENT_LIST_DIR}/controller_jobs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/controller_nodes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/controller_restore.cpp
  ${CMAKE_CURRENT_LIST_DIR}/edge.cpp
  ${CMAKE_CURRENT_LIST_DIR}/event_log.cpp
  ${CMAKE_CURRENT_LIST_DIR}/event_server.cpp
  ${CMAKE_CURRENT_LIST_DIR}/feasibility.cpp
  ${CMAKE_CURRENT_LIST_DIR}/http_frame.cpp
  ${CMAKE_CURRENT_LIST_DIR}/http_server.cpp
  ${CMAKE_CURRENT_LIST_DIR}/job_spec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lifecycle.cpp
  ${CMAKE_CURRENT_LIST_DIR}/logs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prom_text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prometheus.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quota.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/telemetry.cpp
)
