/*
 * wg-peerd native netlink socket.
 *
 * Only what JavaScript cannot do itself: open an AF_NETLINK socket, bind it, set socket options,
 * send one datagram to the kernel, and deliver received datagrams asynchronously through a libuv
 * poll handle so no call ever blocks the event loop. Framing, attributes and families are all
 * TypeScript (src/netlink/).
 *
 * JS surface (see src/netlink/native.ts for the typed view):
 *   new Socket(protocol)          socket(AF_NETLINK, SOCK_RAW|SOCK_CLOEXEC|SOCK_NONBLOCK), bind(pid 0)
 *   socket.portId()               the port id the kernel assigned (getsockname)
 *   socket.setOption(level, name, value)   setsockopt with an int value
 *   socket.send(buffer)           sendto the kernel (pid 0)
 *   socket.start(cb)              poll for readability; cb(err, datagram) per datagram or error
 *   socket.ref() / socket.unref() keep / stop keeping the event loop alive while polling
 *   socket.close()                stop polling and close the descriptor (idempotent)
 *   sendUnixDatagram(address, buffer)   one datagram on a fresh AF_UNIX SOCK_DGRAM socket to a
 *                                 path, or to an abstract name written "@name" (sd_notify's
 *                                 $NOTIFY_SOCKET: Node's dgram knows UDP only); non-blocking,
 *                                 so a full receiver fails with EAGAIN instead of stalling
 *
 * Errors thrown or delivered carry `errno` (positive number), `code` ("ENOBUFS") and `syscall`.
 */
#include <errno.h>
#include <linux/netlink.h>
#include <node_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

/* How many datagrams one readiness callback drains before yielding back to the loop, so a
 * flood on one socket cannot starve timers and HTTP (node_netlink uses the same budget). */
#define READ_BUDGET 32

/* The kernel sizes each dump message by the largest length this socket ever passed to recvmsg,
 * capped at 32 KiB (netlink_recvmsg: nlk->max_recvmsg_len; netlink_dump: alloc_min_size). A
 * reader that receives into exactly-sized buffers keeps dumps at one page per message, eight
 * times as many datagrams for a large WireGuard device or nf_tables object list. So datagrams
 * are received into one reusable buffer of at least this size and copied out at their length. */
#define RECV_BUFFER_MIN (64 * 1024)

typedef struct {
  int fd;
  int polling;
  int closing;
  uv_poll_t *poll;
  char *recv_buffer;
  size_t recv_capacity;
  napi_env env;
  napi_ref callback;
  napi_async_context async_context;
  napi_ref self;
} nl_socket;

#define CHECK(env, call)                                                   \
  do {                                                                     \
    if ((call) != napi_ok) {                                               \
      napi_throw_error((env), NULL, "internal Node-API failure: " #call); \
      return NULL;                                                         \
    }                                                                      \
  } while (0)

/* The errno names, for `code` on errors: strerrorname_np(3) would give them, but it is glibc 2.32's
 * and the release's addon must load on glibc 2.28 (Debian 11 has 2.31, Ubuntu 20.04 2.31, RHEL 8
 * 2.28; test/unit/netlink/addon-glibc.test.ts reads the symbols the addon needs). The list is
 * Linux's own, every name of <asm-generic/errno-base.h> and <asm-generic/errno.h> in their order
 * (x86-64 and arm64 use these numbers; the aliases EWOULDBLOCK and EDEADLOCK name the same numbers
 * as EAGAIN and EDEADLK, which strerrorname_np also answers). The numbers come from <errno.h>. */
#define N(e) [e] = #e
static const char *const ERRNO_NAMES[] = {
    N(EPERM), N(ENOENT), N(ESRCH), N(EINTR), N(EIO), N(ENXIO), N(E2BIG), N(ENOEXEC), N(EBADF),
    N(ECHILD), N(EAGAIN), N(ENOMEM), N(EACCES), N(EFAULT), N(ENOTBLK), N(EBUSY), N(EEXIST),
    N(EXDEV), N(ENODEV), N(ENOTDIR), N(EISDIR), N(EINVAL), N(ENFILE), N(EMFILE), N(ENOTTY),
    N(ETXTBSY), N(EFBIG), N(ENOSPC), N(ESPIPE), N(EROFS), N(EMLINK), N(EPIPE), N(EDOM), N(ERANGE),
    N(EDEADLK), N(ENAMETOOLONG), N(ENOLCK), N(ENOSYS), N(ENOTEMPTY), N(ELOOP), N(ENOMSG), N(EIDRM),
    N(ECHRNG), N(EL2NSYNC), N(EL3HLT), N(EL3RST), N(ELNRNG), N(EUNATCH), N(ENOCSI), N(EL2HLT),
    N(EBADE), N(EBADR), N(EXFULL), N(ENOANO), N(EBADRQC), N(EBADSLT), N(EBFONT), N(ENOSTR),
    N(ENODATA), N(ETIME), N(ENOSR), N(ENONET), N(ENOPKG), N(EREMOTE), N(ENOLINK), N(EADV),
    N(ESRMNT), N(ECOMM), N(EPROTO), N(EMULTIHOP), N(EDOTDOT), N(EBADMSG), N(EOVERFLOW), N(ENOTUNIQ),
    N(EBADFD), N(EREMCHG), N(ELIBACC), N(ELIBBAD), N(ELIBSCN), N(ELIBMAX), N(ELIBEXEC), N(EILSEQ),
    N(ERESTART), N(ESTRPIPE), N(EUSERS), N(ENOTSOCK), N(EDESTADDRREQ), N(EMSGSIZE), N(EPROTOTYPE),
    N(ENOPROTOOPT), N(EPROTONOSUPPORT), N(ESOCKTNOSUPPORT), N(EOPNOTSUPP), N(EPFNOSUPPORT),
    N(EAFNOSUPPORT), N(EADDRINUSE), N(EADDRNOTAVAIL), N(ENETDOWN), N(ENETUNREACH), N(ENETRESET),
    N(ECONNABORTED), N(ECONNRESET), N(ENOBUFS), N(EISCONN), N(ENOTCONN), N(ESHUTDOWN),
    N(ETOOMANYREFS), N(ETIMEDOUT), N(ECONNREFUSED), N(EHOSTDOWN), N(EHOSTUNREACH), N(EALREADY),
    N(EINPROGRESS), N(ESTALE), N(EUCLEAN), N(ENOTNAM), N(ENAVAIL), N(EISNAM), N(EREMOTEIO),
    N(EDQUOT), N(ENOMEDIUM), N(EMEDIUMTYPE), N(ECANCELED), N(ENOKEY), N(EKEYEXPIRED),
    N(EKEYREVOKED), N(EKEYREJECTED), N(EOWNERDEAD), N(ENOTRECOVERABLE), N(ERFKILL), N(EHWPOISON),
};
#undef N

/* The name of errno `err` ("ENOBUFS"), or NULL for a number Linux does not define. */
static const char *errno_name(int err) {
  if (err <= 0 || (size_t)err >= sizeof ERRNO_NAMES / sizeof ERRNO_NAMES[0]) return NULL;
  return ERRNO_NAMES[err];
}

static napi_value make_errno_error(napi_env env, int err, const char *syscall) {
  const char *name = errno_name(err);
  char message[160];
  snprintf(message, sizeof message, "%s %s: %s", syscall, name ? name : "EUNKNOWN", strerror(err));
  napi_value code_value, message_value, error, errno_value, syscall_value;
  napi_create_string_utf8(env, name ? name : "EUNKNOWN", NAPI_AUTO_LENGTH, &code_value);
  napi_create_string_utf8(env, message, NAPI_AUTO_LENGTH, &message_value);
  napi_create_error(env, code_value, message_value, &error);
  napi_create_int32(env, err, &errno_value);
  napi_set_named_property(env, error, "errno", errno_value);
  napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &syscall_value);
  napi_set_named_property(env, error, "syscall", syscall_value);
  return error;
}

static napi_value throw_errno(napi_env env, int err, const char *syscall) {
  napi_throw(env, make_errno_error(env, err, syscall));
  return NULL;
}

static nl_socket *unwrap_this(napi_env env, napi_callback_info info, size_t *argc, napi_value *argv) {
  napi_value this_arg;
  nl_socket *sock = NULL;
  if (napi_get_cb_info(env, info, argc, argv, &this_arg, NULL) != napi_ok) return NULL;
  if (napi_unwrap(env, this_arg, (void **)&sock) != napi_ok || sock == NULL) {
    napi_throw_error(env, NULL, "not a netlink socket");
    return NULL;
  }
  if (sock->fd < 0) {
    napi_throw(env, make_errno_error(env, EBADF, "netlink"));
    return NULL;
  }
  return sock;
}

static void on_poll_closed(uv_handle_t *handle) { free(handle); }

static void stop_and_close(nl_socket *sock) {
  if (sock->poll != NULL) {
    uv_poll_stop(sock->poll);
    uv_close((uv_handle_t *)sock->poll, on_poll_closed);
    sock->poll = NULL;
  }
  sock->polling = 0;
  if (sock->fd >= 0) {
    close(sock->fd);
    sock->fd = -1;
  }
  free(sock->recv_buffer);
  sock->recv_buffer = NULL;
  sock->recv_capacity = 0;
}

static void release_js_refs(nl_socket *sock) {
  if (sock->callback != NULL) {
    napi_delete_reference(sock->env, sock->callback);
    sock->callback = NULL;
  }
  if (sock->async_context != NULL) {
    napi_async_destroy(sock->env, sock->async_context);
    sock->async_context = NULL;
  }
}

static void finalize_socket(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  nl_socket *sock = data;
  stop_and_close(sock);
  release_js_refs(sock);
  free(sock);
}

/* Calls the JS callback as (err, datagram). An exception thrown by the callback is reported as
 * an uncaught exception, the way any other event-loop callback would be. */
static void deliver(nl_socket *sock, napi_value err, napi_value datagram) {
  napi_env env = sock->env;
  napi_value callback, global, undefined, result;
  napi_get_undefined(env, &undefined);
  napi_get_global(env, &global);
  if (napi_get_reference_value(env, sock->callback, &callback) != napi_ok || callback == NULL) return;
  napi_value argv[2] = {err ? err : undefined, datagram ? datagram : undefined};
  if (napi_make_callback(env, sock->async_context, global, callback, 2, argv, &result) ==
      napi_pending_exception) {
    napi_value exception;
    napi_get_and_clear_last_exception(env, &exception);
    napi_fatal_exception(env, exception);
  }
}

static void on_readable(uv_poll_t *handle, int status, int events) {
  (void)events;
  nl_socket *sock = handle->data;
  napi_env env = sock->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  if (status < 0) {
    deliver(sock, make_errno_error(env, -status, "uv_poll"), NULL);
    napi_close_handle_scope(env, scope);
    return;
  }
  for (int i = 0; i < READ_BUDGET && sock->fd >= 0 && sock->polling; i++) {
    /* Learn the datagram's true size first, so a dump message larger than any fixed buffer
     * is never truncated (MSG_TRUNC makes recv return the full length). */
    ssize_t size = recv(sock->fd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
    if (size < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      deliver(sock, make_errno_error(env, errno, "recv"), NULL);
      continue; /* ENOBUFS is reported once; the queue is still readable afterwards */
    }
    size_t wanted = size > RECV_BUFFER_MIN ? (size_t)size : RECV_BUFFER_MIN;
    if (sock->recv_capacity < wanted) {
      char *grown = realloc(sock->recv_buffer, wanted);
      if (grown == NULL) {
        deliver(sock, make_errno_error(env, ENOMEM, "recv"), NULL);
        break;
      }
      sock->recv_buffer = grown;
      sock->recv_capacity = wanted;
    }
    ssize_t got = recv(sock->fd, sock->recv_buffer, sock->recv_capacity, MSG_DONTWAIT);
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      deliver(sock, make_errno_error(env, errno, "recv"), NULL);
      continue;
    }
    napi_value view;
    if (napi_create_buffer_copy(env, (size_t)got, sock->recv_buffer, NULL, &view) != napi_ok) break;
    deliver(sock, NULL, view);
  }
  napi_close_handle_scope(env, scope);
}

static napi_value socket_new(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], this_arg;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, &this_arg, NULL));
  int32_t protocol;
  if (argc < 1 || napi_get_value_int32(env, argv[0], &protocol) != napi_ok) {
    napi_throw_type_error(env, NULL, "protocol must be a number");
    return NULL;
  }
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, protocol);
  if (fd < 0) return throw_errno(env, errno, "socket");
  struct sockaddr_nl local = {.nl_family = AF_NETLINK}; /* nl_pid 0: the kernel picks a port id */
  if (bind(fd, (struct sockaddr *)&local, sizeof local) < 0) {
    int err = errno;
    close(fd);
    return throw_errno(env, err, "bind");
  }
  nl_socket *sock = calloc(1, sizeof *sock);
  if (sock == NULL) {
    close(fd);
    return throw_errno(env, ENOMEM, "calloc");
  }
  sock->fd = fd;
  sock->env = env;
  if (napi_wrap(env, this_arg, sock, finalize_socket, NULL, NULL) != napi_ok) {
    close(fd);
    free(sock);
    napi_throw_error(env, NULL, "napi_wrap failed");
    return NULL;
  }
  return this_arg;
}

static napi_value socket_port_id(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  nl_socket *sock = unwrap_this(env, info, &argc, NULL);
  if (sock == NULL) return NULL;
  struct sockaddr_nl local;
  socklen_t len = sizeof local;
  if (getsockname(sock->fd, (struct sockaddr *)&local, &len) < 0) return throw_errno(env, errno, "getsockname");
  napi_value result;
  CHECK(env, napi_create_uint32(env, local.nl_pid, &result));
  return result;
}

static napi_value socket_set_option(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  nl_socket *sock = unwrap_this(env, info, &argc, argv);
  if (sock == NULL) return NULL;
  int32_t level, name, value;
  if (argc < 3 || napi_get_value_int32(env, argv[0], &level) != napi_ok ||
      napi_get_value_int32(env, argv[1], &name) != napi_ok ||
      napi_get_value_int32(env, argv[2], &value) != napi_ok) {
    napi_throw_type_error(env, NULL, "setOption(level, name, value) takes three integers");
    return NULL;
  }
  int v = value;
  if (setsockopt(sock->fd, level, name, &v, sizeof v) < 0) return throw_errno(env, errno, "setsockopt");
  return NULL;
}

static napi_value socket_send(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  nl_socket *sock = unwrap_this(env, info, &argc, argv);
  if (sock == NULL) return NULL;
  void *data;
  size_t length;
  bool is_buffer = false;
  napi_is_buffer(env, argv[0], &is_buffer);
  if (argc < 1 || !is_buffer || napi_get_buffer_info(env, argv[0], &data, &length) != napi_ok) {
    napi_throw_type_error(env, NULL, "send(buffer) takes a Buffer");
    return NULL;
  }
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  ssize_t sent;
  do {
    sent = sendto(sock->fd, data, length, 0, (struct sockaddr *)&kernel, sizeof kernel);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return throw_errno(env, errno, "sendto");
  return NULL;
}

static napi_value socket_start(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  nl_socket *sock = unwrap_this(env, info, &argc, argv);
  if (sock == NULL) return NULL;
  napi_valuetype type;
  if (argc < 1 || napi_typeof(env, argv[0], &type) != napi_ok || type != napi_function) {
    napi_throw_type_error(env, NULL, "start(callback) takes a function");
    return NULL;
  }
  if (sock->poll != NULL) {
    napi_throw_error(env, NULL, "socket is already started");
    return NULL;
  }
  napi_value resource, name;
  CHECK(env, napi_create_object(env, &resource));
  CHECK(env, napi_create_string_utf8(env, "NetlinkSocket", NAPI_AUTO_LENGTH, &name));
  CHECK(env, napi_async_init(env, resource, name, &sock->async_context));
  CHECK(env, napi_create_reference(env, argv[0], 1, &sock->callback));
  struct uv_loop_s *loop;
  CHECK(env, napi_get_uv_event_loop(env, &loop));
  sock->poll = malloc(sizeof *sock->poll);
  if (sock->poll == NULL) return throw_errno(env, ENOMEM, "malloc");
  int rc = uv_poll_init(loop, sock->poll, sock->fd);
  if (rc < 0) {
    free(sock->poll);
    sock->poll = NULL;
    return throw_errno(env, -rc, "uv_poll_init");
  }
  sock->poll->data = sock;
  rc = uv_poll_start(sock->poll, UV_READABLE, on_readable);
  if (rc < 0) return throw_errno(env, -rc, "uv_poll_start");
  sock->polling = 1;
  return NULL;
}

static napi_value socket_ref(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  nl_socket *sock = unwrap_this(env, info, &argc, NULL);
  if (sock != NULL && sock->poll != NULL) uv_ref((uv_handle_t *)sock->poll);
  return NULL;
}

static napi_value socket_unref(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  nl_socket *sock = unwrap_this(env, info, &argc, NULL);
  if (sock != NULL && sock->poll != NULL) uv_unref((uv_handle_t *)sock->poll);
  return NULL;
}

static napi_value socket_close(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  napi_value this_arg;
  nl_socket *sock = NULL;
  CHECK(env, napi_get_cb_info(env, info, &argc, NULL, &this_arg, NULL));
  if (napi_unwrap(env, this_arg, (void **)&sock) != napi_ok || sock == NULL) return NULL;
  stop_and_close(sock);
  release_js_refs(sock);
  return NULL;
}

static napi_value send_unix_datagram(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  size_t length = 0;
  bool is_buffer = false;
  if (argc < 2 || napi_is_buffer(env, argv[1], &is_buffer) != napi_ok || !is_buffer ||
      napi_get_value_string_utf8(env, argv[0], addr.sun_path, sizeof addr.sun_path, &length) !=
          napi_ok) {
    napi_throw_type_error(env, NULL, "sendUnixDatagram(address, buffer) takes a string and a Buffer");
    return NULL;
  }
  /* The whole address must fit, and its terminating NUL for a path (length counts no NUL). */
  if (length == 0 || length >= sizeof addr.sun_path - 1) return throw_errno(env, ENAMETOOLONG, "sendto");
  /* "@name": the abstract namespace, a leading NUL and no terminating one (unix(7)). */
  socklen_t addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + length);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';
  else addr_len += 1;
  void *data;
  size_t size;
  CHECK(env, napi_get_buffer_info(env, argv[1], &data, &size));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return throw_errno(env, errno, "socket");
  ssize_t sent = sendto(fd, data, size, MSG_NOSIGNAL, (struct sockaddr *)&addr, addr_len);
  int err = errno;
  close(fd);
  if (sent < 0) return throw_errno(env, err, "sendto");
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor methods[] = {
      {"portId", NULL, socket_port_id, NULL, NULL, NULL, napi_default, NULL},
      {"setOption", NULL, socket_set_option, NULL, NULL, NULL, napi_default, NULL},
      {"send", NULL, socket_send, NULL, NULL, NULL, napi_default, NULL},
      {"start", NULL, socket_start, NULL, NULL, NULL, napi_default, NULL},
      {"ref", NULL, socket_ref, NULL, NULL, NULL, napi_default, NULL},
      {"unref", NULL, socket_unref, NULL, NULL, NULL, napi_default, NULL},
      {"close", NULL, socket_close, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_value cls;
  CHECK(env, napi_define_class(env, "Socket", NAPI_AUTO_LENGTH, socket_new, NULL,
                               sizeof methods / sizeof methods[0], methods, &cls));
  CHECK(env, napi_set_named_property(env, exports, "Socket", cls));
  napi_value send_fn;
  CHECK(env, napi_create_function(env, "sendUnixDatagram", NAPI_AUTO_LENGTH, send_unix_datagram,
                                  NULL, &send_fn));
  CHECK(env, napi_set_named_property(env, exports, "sendUnixDatagram", send_fn));
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
