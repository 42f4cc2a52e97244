"""The stand-in's weight-loading progress bar: which bar SGLang 0.5.21 shows, and how tqdm writes it into a log.

WHICH BAR (the sglang==0.5.21 wheel, python/sglang/srt/...):
- model_loader/loader.py L600-L704 (DefaultModelLoader._get_weights_iterator): ``use_multithread =
  extra_config.get("enable_multithread_load", True)`` (extra_config: --model-loader-extra-config, JSON,
  configs/load_config.py L116-118); with safetensors it is turned off only when checkpoint prefetching is active
  (--weight-loader-prefetch-checkpoints), mmap is on (no --weight-loader-disable-mmap), the load format is not
  fastsafetensors and --model-loader-extra-config names neither ``enable_multithread_load`` nor ``num_threads``
  (L651-672). Multi-thread: buffered_multi_thread_safetensors_weights_iterator, 8 threads by default (L382, L681-690),
  bar ``Multi-thread loading shards`` (weight_utils.py L1269-1275); single-thread: safetensors_weights_iterator, bar
  ``Loading safetensors checkpoint shards`` (weight_utils.py L1147-1152). Both: ``bar_format=BAR_FORMAT``
  (utils/common.py L1315), ``disable=not enable_tqdm`` (rank 0 only: weight_utils.py L1132-1134, L1245-1247), tqdm
  from ``tqdm.auto`` (weight_utils.py L39: plain tqdm outside a notebook), written to stderr (tqdm's default file).
- Not modelled: --load-format fastsafetensors (its own bar, weight_utils.py L1200-1208) and .bin checkpoints.

HOW TQDM WRITES IT (tqdm 4.x, std.py: status_printer, format_meter, update, close; checked against tqdm 4.70.1
writing into a file): no newline while the bar runs: each refresh writes ``\\r`` + the bar (padded with spaces to
the previous one's length); one refresh when the bar opens (``0/N [00:00<?, ?it/s]``); an update refreshes only
when at least ``miniters`` steps and ``mininterval`` (0.1 s) passed since the last one (miniters adapts:
dynamic_miniters with smoothing 0.3); close refreshes once more and writes ``\\n``. The rate is an exponential
moving average (smoothing 0.3) of steps over seconds, written ``{:5.2f}it/s``, or ``{:5.2f}s/it`` when a step takes
more than a second; elapsed and remaining as ``MM:SS`` (``H:MM:SS`` from an hour).
"""

import json
import sys
import time

BAR_FORMAT = "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"
MULTI_THREAD = "Multi-thread loading shards"
SINGLE_THREAD = "Loading safetensors checkpoint shards"


def bar_desc(args):
    """The bar the real loader shows for these server args (see the header)."""
    try:
        extra = json.loads(getattr(args, "model_loader_extra_config", None) or "{}")
    except ValueError:
        extra = {}
    if not isinstance(extra, dict):
        extra = {}
    multithread = extra.get("enable_multithread_load", True)
    if (getattr(args, "weight_loader_prefetch_checkpoints", False) and not getattr(args, "weight_loader_disable_mmap", False)
            and multithread and not {"enable_multithread_load", "num_threads"} & set(extra)):
        multithread = False
    return MULTI_THREAD if multithread else SINGLE_THREAD


def format_interval(seconds):
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "%d:%02d:%02d" % (hours, minutes, secs) if hours else "%02d:%02d" % (minutes, secs)


class _Ema:
    """tqdm.utils.EMA: an exponential moving average with bias correction."""

    def __init__(self, smoothing=0.3):
        self.alpha, self.last, self.calls = smoothing, 0.0, 0

    def __call__(self, value=None):
        beta = 1 - self.alpha
        if value is not None:
            self.last = self.alpha * value + beta * self.last
            self.calls += 1
        return self.last / (1 - beta ** self.calls) if self.calls else self.last


class Bar:
    """A tqdm bar with SGLang's BAR_FORMAT, as it lands in a file (stderr into the job's log)."""

    def __init__(self, total, desc, out=None, clock=time.time, mininterval=0.1, maxinterval=10.0, smoothing=0.3):
        self.total, self.desc, self.out, self.clock = total, desc, out or sys.stderr, clock
        self.mininterval, self.maxinterval, self.smoothing = mininterval, maxinterval, smoothing
        self.n = self.last_print_n = 0
        self.start_t = self.last_print_t = clock()
        self.miniters, self.last_len, self.closed = 0, 0, False
        self.ema_dn, self.ema_dt, self.ema_miniters = _Ema(smoothing), _Ema(smoothing), _Ema(smoothing)
        self.refresh()

    def text(self, now=None):
        elapsed = (self.clock() if now is None else now) - self.start_t
        # the moving average while it runs; the average over the whole run once closed (close() drops the EMA)
        rate = self.ema_dn() / self.ema_dt() if self.ema_dt() and not self.closed else None
        if rate is None and elapsed:
            rate = self.n / elapsed
        if rate is None:
            rate_fmt, remaining = "?it/s", "?"
        else:
            inverse = 1 / rate if rate else None
            rate_fmt = ("%5.2fs/it" % inverse) if inverse is not None and inverse > 1 else ("%5.2fit/s" % rate)
            remaining = format_interval((self.total - self.n) / rate) if rate else "?"
        return BAR_FORMAT.format(desc=self.desc, percentage=(self.n / self.total) * 100, n_fmt=self.n,
                                 total_fmt=self.total, elapsed=format_interval(elapsed), remaining=remaining,
                                 rate_fmt=rate_fmt)

    def refresh(self):
        text = self.text()
        self.out.write("\r" + text + " " * max(self.last_len - len(text), 0))
        self.out.flush()
        self.last_len = len(text)

    def update(self, step=1):
        self.n += step
        if self.n - self.last_print_n < self.miniters:
            return
        now = self.clock()
        dt = now - self.last_print_t
        if dt < self.mininterval:
            return
        dn = self.n - self.last_print_n
        if dt and dn:
            self.ema_dn(dn)
            self.ema_dt(dt)
        self.refresh()
        if self.maxinterval and dt >= self.maxinterval:
            self.miniters = dn * (self.mininterval or self.maxinterval) / dt
        else:
            self.miniters = self.ema_miniters(dn * (self.mininterval / dt if self.mininterval and dt else 1))
        self.last_print_n, self.last_print_t = self.n, now

    def close(self):
        self.closed = True
        self.refresh()
        self.out.write("\n")
        self.out.flush()
