"""What a run with profile=True records: host-side phases and per-kernel device times."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Profile:
    target: str
    copy_in_s: float = 0.0
    execute_s: float = 0.0
    copy_out_s: float = 0.0
    # (kernel name, seconds) in call order; a kernel called twice appears twice.
    kernels: list[tuple[str, float]] = field(default_factory=list)
    # Where a device profiler wrote its own trace (the npu: acl.prof's data, read with msprof).
    trace_dir: str | None = None

    @property
    def total_s(self) -> float:
        return self.copy_in_s + self.execute_s + self.copy_out_s

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "copy_in_s": self.copy_in_s,
            "execute_s": self.execute_s,
            "copy_out_s": self.copy_out_s,
            "total_s": self.total_s,
            "kernels": [{"name": n, "seconds": s} for n, s in self.kernels],
            "trace_dir": self.trace_dir,
        }

    def table(self) -> str:
        rows = [
            ("host: copy in", self.copy_in_s),
            ("host: execute", self.execute_s),
            ("host: copy out", self.copy_out_s),
            ("host: total", self.total_s),
        ]
        # Fused kernels are named after every op they hold; the table shows the head of it.
        rows += [(f"kernel: {_shorten(name)}", s) for name, s in self.kernels]
        width = max(len(r[0]) for r in rows)
        lines = [f"profile ({self.target})", f"{'phase'.ljust(width)}  {'ms':>10}"]
        lines += [f"{name.ljust(width)}  {s * 1e3:10.3f}" for name, s in rows]
        return "\n".join(lines)

    __str__ = table


KERNEL_NAME_WIDTH = 60


def _shorten(name: str) -> str:
    return name if len(name) <= KERNEL_NAME_WIDTH else name[: KERNEL_NAME_WIDTH - 3] + "..."
