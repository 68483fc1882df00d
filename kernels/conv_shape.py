"""The shape of one 2-D convolution (ONNX's Conv attributes) and what every algorithm
derives from it: output size, the matrix product per image and group, the input
transform and its tap offsets."""

from __future__ import annotations

from dataclasses import dataclass

from kernels import matmul as mm
from kernels.errors import KernelError
from kernels.layout import PhaseSplit


@dataclass(frozen=True)
class ConvShape:
    """Y[N, Cout, OH, OW] = Conv(X[N, C, H, W], W[Cout, C/group, KH, KW]) with ONNX's
    attributes: pads are (top, left, bottom, right)."""

    batch: int
    channels: int
    height: int
    width: int
    out_channels: int
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)
    group: int = 1

    def __post_init__(self) -> None:
        sizes = {"batch": self.batch, "channels": self.channels, "height": self.height, "width": self.width,
                 "output channels": self.out_channels, "kernel": min(self.kernel), "strides": min(self.strides),
                 "dilations": min(self.dilations), "group": self.group}  # fmt: skip
        for name, value in sizes.items():
            if value < 1:
                raise KernelError(f"convolution {name} must be >= 1, got {value}")
        if min(self.pads) < 0:
            raise KernelError(f"convolution pads must be >= 0, got {self.pads}")
        if self.channels % self.group or self.out_channels % self.group:
            raise KernelError(f"group={self.group} must divide the input channels ({self.channels}) "
                                  f"and the output channels ({self.out_channels})")  # fmt: skip
        if self.out_height < 1 or self.out_width < 1:
            raise KernelError(f"a {self.kernel[0]}x{self.kernel[1]} window with dilation "
                                  f"{self.dilations} does not fit the padded {self.height}x{self.width} input")

    @property
    def out_height(self) -> int:
        span = (self.kernel[0] - 1) * self.dilations[0] + 1
        return (self.height + self.pads[0] + self.pads[2] - span) // self.strides[0] + 1

    @property
    def out_width(self) -> int:
        span = (self.kernel[1] - 1) * self.dilations[1] + 1
        return (self.width + self.pads[1] + self.pads[3] - span) // self.strides[1] + 1

    @property
    def in_per_group(self) -> int:
        return self.channels // self.group

    @property
    def out_per_group(self) -> int:
        return self.out_channels // self.group

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]

    @property
    def depthwise(self) -> bool:
        """One input and one output channel per group (MobileNet's depthwise layers; a
        channel multiplier above 1 is a grouped convolution for the direct algorithm)."""
        return self.group > 1 and self.in_per_group == 1 and self.out_per_group == 1

    @property
    def pointwise(self) -> bool:
        """A 1×1 convolution with stride 1 and no padding: a matrix product on the image."""
        return self.unpadded_1x1 and self.strides == (1, 1)

    @property
    def unpadded_1x1(self) -> bool:
        """A 1×1 convolution without padding, of any stride: a matrix product on every
        stride-th pixel of the image (`subsample`)."""
        return self.kernel == (1, 1) and not any(self.pads)

    def subsample(self) -> tuple[int, int, int, int]:
        """The pixels an unpadded 1×1 layer's product reads as rows of its Aᵀ
        (`MatmulConfig.subsample`): the image's height, width and strides; every pixel
        in order, (0, 0, 1, 1), at stride 1."""
        return (0, 0, 1, 1) if self.strides == (1, 1) else (self.height, self.width, *self.strides)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.out_channels * self.out_height * self.out_width * self.in_per_group * self.taps

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.channels, self.height, self.width)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_channels, self.in_per_group, *self.kernel)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.out_channels, self.out_height, self.out_width)

    def gemm_shape(self) -> mm.MatmulShape:
        """The matrix product of one image and group: Cout/G × OH·OW × Cin/G·KH·KW."""
        return mm.MatmulShape(self.out_per_group, self.out_height * self.out_width, self.in_per_group * self.taps)

    def phase_split(self, lanes: int, slack: int) -> PhaseSplit:
        """The transform of the input that direct and im2col read (`kernels.layout`)."""
        return PhaseSplit(self.batch * self.channels, self.height, self.width, self.strides, self.pads,
                          0.0, lanes, slack)  # fmt: skip

    def tap_offsets(self, split: PhaseSplit) -> list[int]:
        """Each tap's constant offset in a transformed plane, in the weights' (kh, kw) order."""
        dh, dw = self.dilations
        return [split.tap_offset(kh * dh, kw * dw) for kh in range(self.kernel[0]) for kw in range(self.kernel[1])]

    def describe(self) -> str:
        """'1x64x56x56 * 64x64x3x3 s1 p1,1,1,1 d1 g1'."""
        pads = ",".join(map(str, self.pads))
        return (f"{'x'.join(map(str, self.input_shape))} * {'x'.join(map(str, self.weight_shape))} "
                f"s{self.strides[0]}x{self.strides[1]} p{pads} d{self.dilations[0]}x{self.dilations[1]} "
                f"g{self.group}")  # fmt: skip
