"""The report of ``benchmarks.pf_experiment``: tables and figures of ``docs/experiments/particle-filter.md``
from the experiments' results (no experiment runs here)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["report"]


def _final(rows: list[dict[str, Any]]) -> NDArray[np.float64]:
    return np.array([r["final"] for r in rows], dtype=np.float64)


def _ms(rows: list[dict[str, Any]]) -> str:
    f = _final(rows)
    sd = f.std(ddof=1) if f.size > 1 else 0.0
    return f"{f.mean():.3f} ± {sd:.3f} (n={f.size})"


def _band(ax: Any, rows: list[dict[str, Any]], label: str, n_docs: int) -> None:
    x = np.array(rows[0]["docs"]) / n_docs
    y = np.array([r["nmi"] for r in rows])
    m, s = y.mean(axis=0), (y.std(axis=0, ddof=1) if len(rows) > 1 else np.zeros(y.shape[1]))
    (line,) = ax.plot(x, m, label=label)
    ax.fill_between(x, m - s, m + s, alpha=0.2, color=line.get_color())


def _batch_rows(entry: dict[str, Any]) -> list[dict[str, Any]] | None:
    rows = entry.get("batch") or entry.get("b", {}).get("batch")
    return rows if rows else None


def report(res: dict[str, Any], out: Path) -> None:
    """Figures ``pf_exp_{a,b,c}.png`` in ``out`` and Markdown tables on stdout: mean ± sd (n runs) of the final
    out-of-sample NMI, and each particle-filter setting as a fraction of batch Gibbs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("diff3", "rel3", "sim3") if n in res]
    lines: list[str] = []
    sizes = sorted({int(k) for n in names for k in res[n].get("b", {}) if k.isdigit()})
    d_keys = sorted(
        {k for n in names for k in res[n].get("d", {})},
        key=lambda k: (int(k.partition(" r=")[2]), k.startswith("history")),
    )
    specs: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
        ("a", (("none", "no rejuvenation"), ("reservoir", "reservoir 1000"), ("history", "whole history"))),
        ("b", tuple((str(n0), f"init {n0} docs") for n0 in sizes)),
        ("c", (("perplexity", "best of 20 by perplexity"), ("nmi", "best of 20 by NMI"))),
        ("d", tuple((k, _arm_label(k)) for k in d_keys)),
    )
    ratios: dict[str, list[str]] = {}
    for exp, series in specs:
        if not any(exp in res[n] for n in names):
            continue
        fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
        hdr = "| setting | " + " | ".join(names) + " |"
        lines += [f"\n### Experiment {exp}\n", hdr, "|---|" + "---:|" * len(names)]
        rows_md: dict[str, list[str]] = {}
        for j, name in enumerate(names):
            r = res[name].get(exp, {})
            batch = _batch_rows(res[name])
            ax = axes[0, j]
            n_docs = res[name]["n_train_docs"]
            for key, label in series:
                if not r.get(key):
                    rows_md.setdefault(label, []).append("—")
                    ratios.setdefault(f"{exp}: {label}", []).append("—")
                    continue
                _band(ax, r[key], label, n_docs)
                rows_md.setdefault(label, []).append(_ms(r[key]))
                ratio = _final(r[key]).mean() / _final(batch).mean() if batch is not None else math.nan
                ratios.setdefault(f"{exp}: {label}", []).append(f"{100 * ratio:.0f} %")
            if exp == "b" and batch is not None:
                ax.axhline(_final(batch).mean(), color="k", ls="--", lw=1, label="batch Gibbs")
                rows_md.setdefault("batch Gibbs (whole training set)", []).append(_ms(batch))
            if exp == "a" and "init_nmi" in r:
                rows_md.setdefault("initial model alone", []).append(f"{r['init_nmi']:.3f}")
            ax.set_title(name)
            ax.set_xlabel("fraction of training documents seen")
            ax.set_ylabel("out-of-sample NMI")
            ax.set_ylim(0, 1)
        axes[0, -1].legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(out / f"pf_exp_{exp}.png", dpi=110)
        plt.close(fig)
        for label, cells in rows_md.items():
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if ratios:
        lines += ["\n### Particle filter / batch Gibbs (mean NMI ratio; goal ≥ 90 %)\n", hdr]
        lines.append("|---|" + "---:|" * len(names))
        lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in ratios.items()]
    if d_keys:
        lines += ["\n### Experiment d: filter seconds per run (mean)\n", hdr]
        lines.append("|---|" + "---:|" * len(names))
        for key in d_keys:
            secs = [res[n].get("d", {}).get(key) for n in names]
            cells = [f"{np.mean([r['filter_seconds'] for r in rows]):.1f}" if rows else "—" for rows in secs]
            lines.append(f"| {_arm_label(key)} | " + " | ".join(cells) + " |")
    if any("ref" in res[n] for n in names):
        lines += _report_ref(res, names, out, plt)
    print("\n".join(lines))


_ARMS = {"reservoir": "reservoir 1000", "history": "whole history"}


def _arm_label(key: str) -> str:
    """Experiment d's setting names: "history r=300" → "whole history, r = 300"."""
    mode, _, r_len = key.partition(" r=")
    return f"{_ARMS[mode]}, r = {r_len}"


def _report_ref(res: dict[str, Any], names: Sequence[str], out: Path, plt: Any) -> list[str]:
    """Figure ``pf_exp_ref.png`` (batch Gibbs NMI against sweeps, with the goal and the single-pass results)
    and the tables of experiment ``ref``."""
    names = [n for n in names if "ref" in res[n]]
    hdr = ["| " + " | ".join(["setting", *names]) + " |", "|---|" + "---:|" * len(names)]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    cells: dict[str, list[str]] = {}
    for j, name in enumerate(names):
        ref, ax = res[name]["ref"], axes[0, j]
        x = np.array(ref["batch_curve"][0]["sweeps"])
        y = np.array([c["nmi"] for c in ref["batch_curve"]])
        m, sd = y.mean(axis=0), y.std(axis=0, ddof=1) if len(y) > 1 else np.zeros(x.size)
        (line,) = ax.plot(x, m, marker=".", label="batch Gibbs after s sweeps")
        ax.fill_between(x, m - sd, m + sd, alpha=0.2, color=line.get_color())
        ax.axhline(0.9 * m[-1], color="k", ls=":", lw=1, label="goal: 90 % of 2000 sweeps")
        pf = res[name].get("b", {}).get("300")
        if pf:
            ax.axhline(_final(pf).mean(), color="C1", ls="--", lw=1, label="reservoir PF, init 300 docs")
        ax.axhline(_final(ref["scvb0"]).mean(), color="C2", ls="-.", lw=1, label="SCVB0, one pass")
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel("Gibbs sweeps over the whole training set")
        ax.set_ylabel("out-of-sample NMI")
        ax.set_ylim(0, 1)
        for i, s in enumerate(x):
            label, pct = f"batch Gibbs, {s} sweep{'' if s == 1 else 's'}", 100 * m[i] / m[-1]
            cells.setdefault(label, []).append(f"{m[i]:.3f} ± {sd[i]:.3f} ({pct:.0f} %)")
        single = {f"Gibbs on the first {n0} documents alone": rows for n0, rows in ref["gibbs_first"].items()}
        for label, rows in {**single, "SCVB0, one pass": ref["scvb0"]}.items():
            cells.setdefault(label, []).append(f"{_ms(rows)} ({100 * _final(rows).mean() / m[-1]:.0f} %)")
    axes[0, -1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "pf_exp_ref.png", dpi=110)
    plt.close(fig)
    head = "\n### Reference: NMI (in brackets: % of batch Gibbs after 2000 sweeps, same chains)\n"
    return [head, *hdr, *(f"| {label} | " + " | ".join(c) + " |" for label, c in cells.items())]
