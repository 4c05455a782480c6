"""The XLA CPU engine shipped with this package (a build puts
pjrt_c_api_cpu_plugin.so, its RELEASE, LICENSE and THIRD_PARTY_NOTICES
here; see engine_selection.cpu_engine)."""
