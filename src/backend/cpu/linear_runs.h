// backend/cpu/linear_runs.h — how each kind of Linear kernel is driven over a range of a job's
// units (LinearRunFn, linear_plan.h): the table's rows name one of these with their kernels.
#pragma once

#include "backend/cpu/linear_plan.h"

namespace kestrel::cpu {

// Row kernels (LinearKernel::rows_dot, else dot) over the stored rows, in activation tiles.
void run_dot_rows(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch, int64_t u0,
                  int64_t u1);
// The same with LinearKernel::fp8_rows (each row's block scales found from the weight's).
void run_fp8_rows(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch, int64_t u0,
                  int64_t u1);
// The same with the row kernel reading Int8Row (the row's scale and integer bias).
void run_int8_rows(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch, int64_t u0,
                   int64_t u1);

// The panel GEMMs over a packed copy; units are panels.
void run_q8_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch, int64_t u0,
                   int64_t u1);
void run_float_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch,
                      int64_t u0, int64_t u1);
void run_bf16_tiles(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch,
                    int64_t u0, int64_t u1);
void run_fp8_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch,
                    int64_t u0, int64_t u1);
void run_kquant_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch,
                       int64_t u0, int64_t u1);
void run_int8_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch,
                     int64_t u0, int64_t u1);

}  // namespace kestrel::cpu
