"""GPU models the estimators know, and the hardware signature that keys the profile store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from elastico_core.model.errors import SpecError

MAX_DEVICE_MEMORY_MIB = 1 << 24  # 16 TiB: a CPU signature's device is its host (a large one has 2-4 TiB)
MAX_SIGNATURE_PART = 128  # characters of a GPU name, driver or framework


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Datasheet figures of one GPU model (dense, no sparsity)."""

    name: str  # canonical id, e.g. "a100-40gb"
    memory_mib: int
    bf16_tflops: float  # tensor-core peak used by AMP
    fp32_tflops: float  # peak without AMP (TF32 tensor cores where the framework enables them)
    mem_bw_gbs: float  # HBM bandwidth
    sm_count: int

    def __post_init__(self) -> None:
        if self.memory_mib <= 0:
            raise SpecError("must be > 0", where=f"gpu model {self.name!r}", field="memory_mib")


# nvidia-smi's memory.total for each part; TFLOPs and bandwidth from NVIDIA's datasheets (SXM).
KNOWN_GPUS: Mapping[str, GpuModel] = MappingProxyType(
    {
        "a100-40gb": GpuModel("a100-40gb", 40960, 312.0, 156.0, 1555.0, 108),
        "a100-80gb": GpuModel("a100-80gb", 81920, 312.0, 156.0, 2039.0, 108),
        "h100-80gb": GpuModel("h100-80gb", 81559, 989.0, 494.0, 3350.0, 132),
        "h200-141gb": GpuModel("h200-141gb", 143771, 989.0, 494.0, 4800.0, 132),
    }
)

_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "a100": "a100-40gb",
        "a100-40g": "a100-40gb",
        "a100-80g": "a100-80gb",
        "h100": "h100-80gb",
        "h100-80g": "h100-80gb",
        "h200": "h200-141gb",
        "h200-141g": "h200-141gb",
        "nvidia a100-sxm4-40gb": "a100-40gb",
        "nvidia a100-sxm4-80gb": "a100-80gb",
        "nvidia h100 80gb hbm3": "h100-80gb",
        "nvidia h200": "h200-141gb",
    }
)


def gpu_model(name: str) -> GpuModel:
    """Look a GPU model up by its canonical name or a common alias (nvidia-smi's name too)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return KNOWN_GPUS[key]
    except KeyError:
        known = ", ".join(KNOWN_GPUS)
        raise SpecError(f"unknown GPU model {name!r} (known: {known})", field="gpu") from None


@dataclass(frozen=True, slots=True)
class HardwareSignature:
    """What a measured profile is valid for (§4.1): GPU model and memory, driver, framework.

    Estimated rows carry ``driver="any"`` and ``framework="any"``: they hold for every driver.
    """

    gpu: str
    gpu_mem_mib: int
    driver: str = "any"
    framework: str = "any"

    def __post_init__(self) -> None:
        for name in ("gpu", "driver", "framework"):
            part = getattr(self, name)
            if not isinstance(part, str) or not part or "|" in part or "\x00" in part or len(part) > MAX_SIGNATURE_PART:
                raise SpecError(f"want text of 1..{MAX_SIGNATURE_PART} characters without '|', got {str(part)[:40]!r}",
                                where="hardware signature", field=name)  # fmt: skip
        mem = self.gpu_mem_mib
        if not isinstance(mem, int) or isinstance(mem, bool) or not 0 <= mem <= MAX_DEVICE_MEMORY_MIB:
            raise SpecError(f"want an integer 0..{MAX_DEVICE_MEMORY_MIB} MiB, got {str(mem)[:40]}",
                            where="hardware signature", field="gpu_mem_mib")  # fmt: skip

    @property
    def key(self) -> str:
        return f"{self.gpu}|{self.gpu_mem_mib}|{self.driver}|{self.framework}"

    @classmethod
    def from_key(cls, key: str) -> HardwareSignature:
        parts = key.split("|")
        if len(parts) != 4 or not parts[1].isdigit() or len(parts[1]) > 12:
            raise SpecError(f"malformed hardware signature {key[:200]!r} (want gpu|mem|driver|framework)")
        return cls(parts[0], int(parts[1]), parts[2], parts[3])

    @classmethod
    def estimated(cls, model: GpuModel) -> HardwareSignature:
        return cls(model.name, model.memory_mib)

    def slug(self) -> str:
        """A file-name-safe form of the key."""
        raw = f"{self.gpu}_{self.gpu_mem_mib}_{self.driver}_{self.framework}"
        return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in raw)
