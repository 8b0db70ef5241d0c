"""The picture of a chaos run: acknowledged records per second (HTTP and Kafka producers) over
time, with each fault as a shaded span (or a line, for an instant reassignment)."""
from __future__ import annotations

from itertools import pairwise
from typing import Any, Sequence

FAULT_COLOURS = {"broker_kill": "tab:red", "controller_kill": "tab:purple", "owner_pause": "tab:orange",
                 "disk_full": "tab:brown", "s3_errors": "tab:pink", "s3_latency": "tab:olive", "reassign": "tab:gray",
                 "net_isolate": "tab:cyan", "net_broker_controllers": "tab:blue", "net_broker_s3": "tab:green",
                 "net_leader_followers": "indigo", "net_one_way": "teal", "net_clients_broker": "navy",
                 "net_flap": "gold"}


def rates(samples: Sequence[tuple[float, int, int]]) -> tuple[list[float], list[float], list[float]]:
    """(times, HTTP acks/s, Kafka acks/s) between consecutive ``(t_s, http_total, kafka_total)`` samples."""
    times, http, kafka = [], [], []
    for (t0, h0, k0), (t1, h1, k1) in pairwise(samples):
        if t1 > t0:
            times.append(t1)
            http.append((h1 - h0) / (t1 - t0))
            kafka.append((k1 - k0) / (t1 - t0))
    return times, http, kafka


def draw(path: str, title: str, samples: Sequence[tuple[float, int, int]], applied: Sequence[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    times, http, kafka = rates(samples)
    fig, ax = plt.subplots(figsize=(12, 4.5))
    ax.plot(times, http, label="HTTP producer acks/s", color="tab:blue")
    ax.plot(times, kafka, label="Kafka producer acks/s", color="tab:green")
    kinds_seen: set[str] = set()
    for event in applied:
        colour = FAULT_COLOURS.get(event["kind"], "black")
        kinds_seen.add(event["kind"])
        if event["end_s"] > event["start_s"]:
            ax.axvspan(event["start_s"], event["end_s"], color=colour, alpha=0.18)
            if event.get("healed_s") and event["healed_s"] > event["end_s"]:  # back, until serving again
                ax.axvspan(event["end_s"], event["healed_s"], color=colour, alpha=0.07, hatch="//")
        else:
            ax.axvline(event["start_s"], color=colour, alpha=0.5, linestyle=":")
    handles, labels = ax.get_legend_handles_labels()
    handles += [Patch(color=FAULT_COLOURS.get(k, "black"), alpha=0.4) for k in sorted(kinds_seen)]
    labels += sorted(kinds_seen)
    ax.legend(handles, labels, loc="upper right", fontsize=8, ncol=2)
    ax.set_xlabel("seconds since the workload started")
    ax.set_ylabel("acknowledged records / s")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
