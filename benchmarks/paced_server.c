/* A light paced SSE server: the streams figure's measuring instrument (benchmarks only).
 *
 *   paced_server [-p PORT] [-t TTFT_MS] [-i ITL_MS] [-n TOKENS] [-m MODEL]
 *
 * Listens on 127.0.0.1:PORT (0: the kernel picks; the port is printed as "PORT <n>" on
 * stdout), one thread, epoll, non-blocking sockets, TCP_NODELAY. HTTP/1.1 keep-alive:
 *
 * - GET .../models: {"object":"list","data":[{"id":MODEL,...}]};
 * - POST .../completions and .../chat/completions with "stream":true: the response head at
 *   once, then one content chunk (Transfer-Encoding: chunked, text/event-stream, the OpenAI
 *   shape) TTFT ms after the request's last byte was read, then one every ITL ms, TOKENS of them
 *   ("max_tokens" of the body when it has one), each due time fixed from that arrival (no
 *   drift); with the last, a finish chunk, a usage chunk carrying the server-timing extension
 *   veeksha reads from its built-in simulator ("timings": arrival_ns, first_token_ns,
 *   last_token_ns and chunk_ns, every time CLOCK_MONOTONIC, as Python's time.monotonic_ns,
 *   each chunk's read right before its write), "data: [DONE]" and the last chunk;
 * - anything else: 404 (a non-streaming completion: 400).
 *
 * Enough HTTP for veeksha's client, nothing more: request bodies framed by Content-Length; a
 * request pipelined behind a stream is answered (and stamped) when that stream ends; with
 * "Connection: close" the socket is closed right after the last write (a response the socket
 * did not take whole is cut).
 *
 * Due writes wait in a min-heap (one entry per streaming connection); the loop sleeps in
 * epoll_pwait2 (glibc >= 2.35) until the earliest, in ns, with a timer slack of 1 ns, so pacing
 * has no millisecond rounding (a timerfd re-armed after every write cost 13 % of the server's
 * CPU at 128 streams; most of the rest is the kernel's loopback TCP path, which runs the
 * receiving side in the sender's system call).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct Conn {
    int fd, heap_idx, chat, keep_alive, streaming, n, sent, prompt_tokens;
    char *in, *out;
    size_t in_len, in_cap, out_len, out_off, out_cap;
    int64_t arrival, first, due, *chunk_ns;
    unsigned long id;
} Conn;

static int64_t ttft_ns = 50000000, itl_ns = 5000000;
static int tokens = 64, ep;
static const char *model = "veeksha-sim";
static Conn **heap;
static int heap_len, heap_cap;
static unsigned long next_id;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t cap2 = *cap ? *cap : 16;
    while (cap2 < need) cap2 *= 2;
    p = realloc(p, cap2 * size);
    if (!p) { perror("realloc"); exit(1); }
    *cap = cap2;
    return p;
}

/* ---------------------------------------------------------------- the heap of due writes */
static void heap_swap(int a, int b) {
    Conn *t = heap[a];
    heap[a] = heap[b];
    heap[b] = t;
    heap[a]->heap_idx = a;
    heap[b]->heap_idx = b;
}

static void heap_up(int i) {
    while (i > 0 && heap[(i - 1) / 2]->due > heap[i]->due) {
        heap_swap(i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < heap_len && heap[l]->due < heap[m]->due) m = l;
        if (r < heap_len && heap[r]->due < heap[m]->due) m = r;
        if (m == i) return;
        heap_swap(i, m);
        i = m;
    }
}

static void heap_push(Conn *c) {
    size_t cap = heap_cap;
    heap = grow(heap, &cap, heap_len + 1, sizeof *heap);
    heap_cap = (int)cap;
    heap[heap_len] = c;
    c->heap_idx = heap_len++;
    heap_up(c->heap_idx);
}

static void heap_remove(Conn *c) {
    int i = c->heap_idx;
    if (i < 0) return;
    c->heap_idx = -1;
    if (i != --heap_len) {
        heap[i] = heap[heap_len];
        heap[i]->heap_idx = i;
        heap_down(i);
        heap_up(i);
    }
}

/* ---------------------------------------------------------------- connections */
static void conn_close(Conn *c) {
    heap_remove(c);
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c->chunk_ns);
    free(c);
}

static void want_out(Conn *c, int on) {
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Write now, or keep what the socket does not take for EPOLLOUT; -1: the peer is gone. */
static int put(Conn *c, const char *buf, size_t len) {
    if (c->out_len == c->out_off) {
        while (len) {
            ssize_t w = send(c->fd, buf, len, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN) break;
                return -1;
            }
            buf += w;
            len -= (size_t)w;
        }
        if (!len) return 0;
        c->out_len = c->out_off = 0;
        want_out(c, 1);
    }
    c->out = grow(c->out, &c->out_cap, c->out_len + len, 1);
    memcpy(c->out + c->out_len, buf, len);
    c->out_len += len;
    return 0;
}

static int flush_out(Conn *c) {
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0) return errno == EAGAIN ? 0 : -1;
        c->out_off += (size_t)w;
    }
    c->out_len = c->out_off = 0;
    want_out(c, 0);
    return 0;
}

static int answer(Conn *c, int status, const char *reason, const char *type, const char *body) {
    char head[512];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %zu\r\n%s\r\n", status,
                     reason, type, strlen(body), c->keep_alive ? "" : "connection: close\r\n");
    if (put(c, head, (size_t)n) < 0 || put(c, body, strlen(body)) < 0) return -1;
    return c->keep_alive ? 0 : -1;
}

/* One SSE event as one HTTP chunk: "<hex>\r\n" + event + "\r\n". */
static int frame(char *dst, const char *event, int len) {
    int h = sprintf(dst, "%x\r\n", len);
    memcpy(dst + h, event, (size_t)len);
    memcpy(dst + h + len, "\r\n", 2);
    return h + len + 2;
}

static int event_head(char *dst, Conn *c) {
    return sprintf(dst, "data: {\"id\":\"cmpl-%lu\",\"object\":\"%s\",\"created\":0,\"model\":\"%s\",",
                   c->id, c->chat ? "chat.completion.chunk" : "text_completion", model);
}

/* The next content chunk of c (and the end of the response with the last); -1: close c. */
static int emit(Conn *c) {
    static char *buf, *ev;
    static size_t buf_cap, ev_cap;
    size_t need = 1024 + 3 * strlen(model) + (size_t)c->n * 24;
    buf = grow(buf, &buf_cap, 2 * need, 1);
    ev = grow(ev, &ev_cap, need, 1);
    int64_t t = now_ns();
    c->chunk_ns[c->sent++] = t;
    if (c->sent == 1) c->first = t;
    int len = event_head(ev, c);
    len += sprintf(ev + len,
                   c->chat ? "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"},"
                             "\"logprobs\":null,\"finish_reason\":null}]}\n\n"
                           : "\"choices\":[{\"index\":0,\"text\":\" tok\",\"logprobs\":null,"
                             "\"finish_reason\":null}]}\n\n");
    int out = frame(buf, ev, len);
    if (c->sent < c->n) {
        c->due = c->arrival + ttft_ns + (int64_t)c->sent * itl_ns;
        heap_push(c);
        return put(c, buf, (size_t)out);
    }
    len = event_head(ev, c);
    len += sprintf(ev + len,
                   c->chat ? "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
                             "\"finish_reason\":\"length\"}]}\n\n"
                           : "\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
                             "\"finish_reason\":\"length\"}]}\n\n");
    len += event_head(ev + len, c);
    len += sprintf(ev + len,
                   "\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,"
                   "\"total_tokens\":%d},\"timings\":{\"arrival_ns\":%lld,\"first_token_ns\":%lld,"
                   "\"last_token_ns\":%lld,\"completion_tokens\":%d,\"chunk_ns\":[",
                   c->prompt_tokens, c->n, c->prompt_tokens + c->n, (long long)c->arrival,
                   (long long)c->first, (long long)t, c->n);
    for (int i = 0; i < c->n; i++)
        len += sprintf(ev + len, i ? ",%lld" : "%lld", (long long)c->chunk_ns[i]);
    len += sprintf(ev + len, "]}}\n\ndata: [DONE]\n\n");
    out += frame(buf + out, ev, len);
    memcpy(buf + out, "0\r\n\r\n", 5);
    out += 5;
    c->streaming = 0;
    if (put(c, buf, (size_t)out) < 0) return -1;
    return c->keep_alive ? 0 : -1;
}

static const char *find_ci(const char *s, const char *end, const char *key) {
    size_t k = strlen(key);
    for (; s + k <= end; s++)
        if (strncasecmp(s, key, k) == 0) return s;
    return NULL;
}

static int ends_with(const char *path, size_t len, const char *suffix) {
    size_t k = strlen(suffix);
    return len >= k && memcmp(path + len - k, suffix, k) == 0;
}

/* Words of the prompt (the body's start up to "max_tokens", as veeksha writes it): a stand-in
 * for its token count (usage.prompt_tokens). */
static int count_words(const char *body, const char *end) {
    int words = 0, in_word = 0;
    for (const char *p = body; p < end; p++) {
        int space = *p == ' ' || *p == '\n' || *p == '"';
        words += !space && !in_word;
        in_word = !space;
    }
    return words;
}

/* Requests complete in c->in: answer them; -1: close c. */
static int serve(Conn *c, int64_t t) {
    while (!c->streaming) {
        char *in = c->in, *end = in + c->in_len;
        char *hend = c->in_len ? memmem(in, c->in_len, "\r\n\r\n", 4) : NULL;
        if (!hend) return c->in_len > 65536 ? -1 : 0;
        size_t clen = 0;
        const char *cl = find_ci(in, hend, "\r\ncontent-length:");
        if (cl) clen = strtoul(cl + 17, NULL, 10);
        char *body = hend + 4;
        if ((size_t)(end - body) < clen) return 0;
        char *bend = body + clen;
        char *sp = memchr(in, ' ', (size_t)(hend - in));
        char *sp2 = sp ? memchr(sp + 1, ' ', (size_t)(hend - sp - 1)) : NULL;
        if (!sp2) return -1;
        char *q = memchr(sp + 1, '?', (size_t)(sp2 - sp - 1));
        size_t plen = (size_t)((q ? q : sp2) - sp - 1);
        c->keep_alive = !find_ci(in, hend, "\r\nconnection: close");
        int post = strncmp(in, "POST ", 5) == 0;
        int rc;
        if (!post && ends_with(sp + 1, plen, "/models")) {
            char doc[512];
            snprintf(doc, sizeof doc,
                     "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\","
                     "\"owned_by\":\"paced\"}]}",
                     model);
            rc = answer(c, 200, "OK", "application/json", doc);
        } else if (post && ends_with(sp + 1, plen, "/completions")) {
            if (!memmem(body, clen, "\"stream\":true", 13)) {
                rc = answer(c, 400, "Bad Request", "application/json",
                            "{\"error\":{\"message\":\"stream only\",\"code\":400}}");
            } else {
                const char *mt = memmem(body, clen, "\"max_tokens\":", 13);
                int n = mt ? atoi(mt + 13) : tokens;
                c->n = n > 0 && n <= 100000 ? n : tokens;
                c->chat = ends_with(sp + 1, plen, "/chat/completions");
                c->prompt_tokens = count_words(clen > 10 ? body + 10 : body, mt ? mt : bend);
                free(c->chunk_ns);
                c->chunk_ns = malloc(sizeof(int64_t) * (size_t)c->n);
                c->id = ++next_id;
                c->arrival = t;
                c->sent = 0;
                c->streaming = 1;
                c->due = t + ttft_ns;
                heap_push(c);
                static const char head[] =
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
                static const char head_close[] =
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
                    "connection: close\r\n\r\n";
                rc = c->keep_alive ? put(c, head, sizeof head - 1)
                                   : put(c, head_close, sizeof head_close - 1);
            }
        } else {
            rc = answer(c, 404, "Not Found", "application/json",
                        "{\"error\":{\"message\":\"not found\",\"code\":404}}");
        }
        size_t used = (size_t)(bend - in);
        memmove(c->in, bend, c->in_len - used);
        c->in_len -= used;
        if (rc < 0) return -1;
    }
    return 0;
}

static int on_read(Conn *c) {
    for (;;) {
        c->in = grow(c->in, &c->in_cap, c->in_len + 16384, 1);
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (r == 0) return -1;
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) break;
            return -1;
        }
        c->in_len += (size_t)r;
    }
    return serve(c, now_ns()); /* arrival: right after the read that brought the last byte */
}

static void run_due(void) {
    int64_t t = now_ns();
    while (heap_len && heap[0]->due <= t) {
        Conn *c = heap[0];
        heap_remove(c);
        if (emit(c) < 0 || (!c->streaming && serve(c, now_ns()) < 0)) conn_close(c);
    }
}

int main(int argc, char **argv) {
    int port = 0, opt;
    while ((opt = getopt(argc, argv, "p:t:i:n:m:")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 't': ttft_ns = (int64_t)(atof(optarg) * 1e6); break;
        case 'i': itl_ns = (int64_t)(atof(optarg) * 1e6); break;
        case 'n': tokens = atoi(optarg); break;
        case 'm': model = optarg; break;
        default:
            fprintf(stderr, "usage: %s [-p PORT] [-t TTFT_MS] [-i ITL_MS] [-n TOKENS] [-m MODEL]\n",
                    argv[0]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof addr;
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(ls, 1024) < 0 ||
        getsockname(ls, (struct sockaddr *)&addr, &alen) < 0) {
        perror("listen");
        return 1;
    }
    ep = epoll_create1(0);
    prctl(PR_SET_TIMERSLACK, 1UL); /* wake at the due time, not up to 50 µs after it */
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    printf("PORT %d\n", ntohs(addr.sin_port));
    fflush(stdout);
    struct epoll_event evs[256];
    for (;;) {
        struct timespec wait, *timeout = NULL;
        if (heap_len) {
            int64_t left = heap[0]->due - now_ns();
            if (left < 0) left = 0;
            wait.tv_sec = left / 1000000000;
            wait.tv_nsec = left % 1000000000;
            timeout = &wait;
        }
        int n = epoll_pwait2(ep, evs, 256, timeout, NULL);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == NULL) {
                int fd;
                while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    Conn *c = calloc(1, sizeof *c);
                    c->fd = fd;
                    c->heap_idx = -1;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
            } else {
                Conn *c = p;
                int bad = evs[i].events & (EPOLLERR | EPOLLHUP);
                if (!bad && (evs[i].events & EPOLLOUT)) bad = flush_out(c) < 0;
                if (!bad && (evs[i].events & EPOLLIN)) bad = on_read(c) < 0;
                if (bad) conn_close(c);
            }
        }
        run_due();
    }
}
