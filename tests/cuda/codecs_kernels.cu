// Compiles every kernel of runtime/collc_codecs.cuh (tests/test_codecs.py: nvcc -arch=sm_90 -c).
#include <collc_codecs.cuh>
