"""Codecs for compressed collectives: numpy references of the CUDA kernels in ``runtime/collc_codecs.cuh``.

=============  ==========  ===========  ==========  ===========  ===========
codec          error       idempotent   homomorph.  static size  CUDA
=============  ==========  ===========  ==========  ===========  ===========
``ebq(eb)``    abs <= eb   yes          no          no           yes
``fwq(bits,    rel to      yes          no          yes          yes
block)``       block max
``hq(eb)``     abs <= eb   yes          sum         yes          yes
``fp16``       cast 2^-11  yes          no          yes          yes
``bf16``       cast 2^-8   yes          no          yes          yes
``lossless``   none        yes          no          no           yes (fp32)
``zfp(rate)``  unbounded   no           no          yes          no (zfpy)
=============  ==========  ===========  ==========  ===========  ===========

``parse_codec("ebq(eb=1e-3)")`` gives a configured `Codec`; ``describe()``
lists them with their properties.  ``docs/codecs.md`` documents the payload
layouts, error models and how the kernels stay bit-exact with these
references.
"""

from collc.codecs.base import Codec, CodecValueError, ErrorModel
from collc.codecs.casts import Bf16, Fp16
from collc.codecs.ebq import Ebq
from collc.codecs.fwq import Fwq
from collc.codecs.grid import Hq
from collc.codecs.lossless import Lossless
from collc.codecs.registry import CODECS, describe, parse_codec
from collc.codecs.zfp import Zfp

__all__ = [
    "CODECS",
    "Bf16",
    "Codec",
    "CodecValueError",
    "Ebq",
    "ErrorModel",
    "Fp16",
    "Fwq",
    "Hq",
    "Lossless",
    "Zfp",
    "describe",
    "parse_codec",
]
