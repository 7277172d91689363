# The soak's plot: `python3 - CSV PNG WARM_S TITLE`, fed this script on
# standard input by saguin-bench. Six panels over the run's hours, the
# warm-up shaded.
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

csv_path, png_path, warm_s, title = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
with open(csv_path, newline="") as f:
    rows = list(csv.DictReader(f))


def column(name, scale=1.0):
    return [float(r[name]) * scale if r.get(name) not in (None, "") else float("nan") for r in rows]


def metric(prefix):
    """The sum of every series whose name starts with prefix (labels included)."""
    names = [n for n in (rows[0].keys() if rows else []) if n == prefix or n.startswith(prefix + "{")]
    if not names:
        return None
    return [sum(float(r[n]) for n in names if r[n] != "") for r in rows]


hours = column("elapsed_s", 1 / 3600)
mib = 1 / (1024 * 1024)
panels = [
    ("RSS (MiB)", [("saguin", column("rss_bytes", mib))]),
    ("open files", [("saguin", column("open_files"))]),
    ("redb file (MiB)", [("file size", column("store_bytes", mib))]),
    ("written to the device (MiB)", [("write_bytes", column("write_bytes", mib))]),
    ("PUBACK p99 per sample (ms)", [
        ("broadcast QoS 1", column("broadcast_puback_p99_us", 1e-3)),
        ("append, after its commit", column("append_puback_p99_us", 1e-3)),
    ]),
    ("connections (and the load average, right)", [
        (label, values) for label, values in [
            ("connections", metric("saguin_connections")),
            ("sessions offline", metric("saguin_sessions_offline")),
        ] if values is not None
    ]),
]

fig, axes = plt.subplots(3, 2, figsize=(11, 8.5), sharex=True)
for ax, (label, lines) in zip(axes.flat, panels):
    for name, values in lines:
        ax.plot(hours, values, marker=".", markersize=3, linewidth=1, label=name)
    ax.set_title(label, fontsize=10)
    ax.axvspan(0, warm_s / 3600, color="0.9", zorder=0)
    if label.startswith("PUBACK"):
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.grid(True, linewidth=0.3)
    if len(lines) > 1:
        ax.legend(fontsize=8, loc="lower right")
load = axes.flat[5].twinx()
load.plot(hours, column("load_1min"), color="0.5", linewidth=1, linestyle=":", label="load average")
load.set_ylim(bottom=0)
load.legend(fontsize=8, loc="upper right")
for ax in axes[-1]:
    ax.set_xlabel("hours (warm-up shaded)")
fig.suptitle(title, fontsize=11)
fig.tight_layout()
fig.savefig(png_path, dpi=80)
