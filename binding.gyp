{
  "targets": [
    {
      "target_name": "netlink",
      "sources": ["native/netlink.c"],
      "cflags": ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"],
      "defines": ["NAPI_VERSION=8", "_GNU_SOURCE"]
    }
  ]
}
