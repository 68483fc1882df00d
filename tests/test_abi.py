"""The C ABI: the generated header declares what the library exports, and a C
program that includes it links and calls a generated kernel."""

from __future__ import annotations

import subprocess

import pytest

from autoconfig.probe.host import named_target, this_host
from kernels import fma
from kernels.abi import KernelSignature, Param, Role, c_header
from kernels.library import build_library

C_PROGRAM = r"""
#include <stdio.h>
#include "kernels.h"
int main(void) {
  float a[11], b[11], c[11], out[11];
  for (int i = 0; i < 11; i++) { a[i] = (float)i; b[i] = 2.0f; c[i] = 1.0f; }
  ac_fma_f32_l8(out, a, b, c, 11);
  for (int i = 0; i < 11; i++) if (out[i] != 2.0f * i + 1.0f) { printf("bad %d\n", i); return 1; }
  printf("ok\n");
  return 0;
}
"""


def test_header_declares_the_kernel():
    header = c_header([fma.signature(fma.FmaConfig(8))])
    assert (
        "void ac_fma_f32_l8(float *out, const float *a, const float *b, const float *c, int64_t n);"
        in header
    )
    assert "#include <stdint.h>" in header and 'extern "C"' in header


def test_c_program_calls_the_generated_kernel(tmp_path):
    host = named_target("host")
    library = build_library(fma.generate(fma.FmaConfig(8), host), this_host(), tmp_path / "lib")
    exe = tmp_path / "prog"
    (tmp_path / "prog.c").write_text(C_PROGRAM)
    subprocess.run(
        ["cc", "-O1", f"-I{library.header.parent}", "-o", str(exe), str(tmp_path / "prog.c"),
         str(library.objects[0].path)],
        check=True,
    )  # fmt: skip
    assert subprocess.run([str(exe)], capture_output=True, text=True).stdout == "ok\n"


def test_signature_rejects_sizes_before_buffers():
    with pytest.raises(ValueError, match="buffers must precede sizes"):
        KernelSignature("ac_bad", (Param("n", Role.SIZE), Param("x", Role.OUT, ("n",))), "bad")
