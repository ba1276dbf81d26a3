// SPDX-License-Identifier: Apache-2.0
// Preprocessed by the build into the declarations stream_work_test.cc reads.
#include "gpuos/cuda_internal.h"
