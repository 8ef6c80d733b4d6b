/* rt_tma.c — TMA tensor maps (cuTensorMapEncodeTiled) for row-major 2-D
 * tensors, and the checks that name which TMA constraint a tensor breaks.
 *
 * cf_rt_tma_check is pure (no GPU); encoding goes through the driver layer
 * (rt_cuda.h). */
#include "rt_cuda.h"

#include <stdio.h>

#define TWO_POW_32 ((uint64_t)1 << 32)
#define TWO_POW_40 ((uint64_t)1 << 40)

cf_status cf_rt_tma_check(const char *name, cf_dtype t, const void *dev_ptr, uint64_t rows,
                          uint64_t cols, uint64_t pitch, uint32_t box_rows, uint32_t box_cols,
                          int swizzle, cf_error *err)
{
    char who[CF_MAX_NAME + 16];
    snprintf(who, sizeof who, name ? "tensor '%s'" : "tensor", name);
    if ((unsigned)t >= CF_DTYPE_COUNT)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "%s: bad dtype %d", who, (int)t);
    const char *tn = cf_dtype_name(t);
    uint64_t es = cf_dtype_size(t);
    if (!dev_ptr)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "%s: null device pointer", who);
    if ((uintptr_t)dev_ptr % 16)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: base address %p is not 16-byte aligned (TMA needs a 16-byte "
                         "aligned global address; offset %u bytes)",
                         who, dev_ptr, (unsigned)((uintptr_t)dev_ptr % 16));
    if (rows == 0 || cols == 0)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "%s: empty shape [%llu, %llu]",
                         who, (unsigned long long)rows, (unsigned long long)cols);
    if (rows > TWO_POW_32 || cols > TWO_POW_32)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: dimension %llu exceeds 2^32 (the TMA limit per dimension)", who,
                         (unsigned long long)(rows > TWO_POW_32 ? rows : cols));
    if (pitch < cols)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "%s: row pitch %llu elements is smaller than the %llu columns", who,
                         (unsigned long long)pitch, (unsigned long long)cols);
    if (pitch >= TWO_POW_40 / es)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: row pitch %llu elements is not below 2^40 bytes (the TMA stride "
                         "limit)", who, (unsigned long long)pitch);
    uint64_t pitch_bytes = pitch * es;
    if (pitch_bytes % 16)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: row pitch %llu bytes is not a multiple of 16 (TMA needs 16-byte "
                         "aligned pitches; pad the leading dimension to a multiple of %llu %s "
                         "elements)",
                         who, (unsigned long long)pitch_bytes, (unsigned long long)(16 / es), tn);
    if (box_rows == 0 || box_cols == 0 || box_rows > 256 || box_cols > 256)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: box %u x %u: each box dimension must be 1..256 (TMA box limit)",
                         who, box_rows, box_cols);
    if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "%s: swizzle %d bytes: must be 0, 32, 64 or 128", who, swizzle);
    uint64_t inner = (uint64_t)box_cols * es;
    if (inner % 16)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: inner box of %u %s elements is %llu bytes, not a multiple of 16 "
                         "(TMA needs 16-byte box rows; use a multiple of %llu columns)",
                         who, box_cols, tn, (unsigned long long)inner,
                         (unsigned long long)(16 / es));
    if (swizzle && inner > (uint64_t)swizzle)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: inner box of %u %s elements is %llu bytes, more than the %d-byte "
                         "swizzle span (use at most %llu columns per box)",
                         who, box_cols, tn, (unsigned long long)inner, swizzle,
                         (unsigned long long)(swizzle / (int)es));
    return CF_OK;
}

cf_status cf_rt_tensor_map_2d_named(void *desc128, const char *name, cf_dtype t,
                                    const void *dev_ptr, uint64_t rows, uint64_t cols,
                                    uint64_t pitch, uint32_t box_rows, uint32_t box_cols,
                                    int swizzle, cf_error *err)
{
    cf_status st = cf_rt_tma_check(name, t, dev_ptr, rows, cols, pitch, box_rows, box_cols,
                                   swizzle, err);
    if (st != CF_OK)
        return st;
    if (!desc128 || (uintptr_t)desc128 % 64)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "tensor map storage %p is not 64-byte aligned", desc128);
    CF_RT_INIT();
    _Static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");
    static const CUtensorMapDataType types[] = {CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                                CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                                CU_TENSOR_MAP_DATA_TYPE_FLOAT32};
    _Static_assert(CF_ARRAY_LEN(types) == CF_DTYPE_COUNT, "types out of sync");
    CUtensorMapSwizzle sw = swizzle == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                            : swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                            : swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                            : CU_TENSOR_MAP_SWIZZLE_NONE;
    cuuint64_t dims[2] = {cols, rows}, strides[1] = {pitch * cf_dtype_size(t)};
    cuuint32_t box[2] = {box_cols, box_rows}, estr[2] = {1, 1};
    CF_CU_CHECK(cf_rt_cu.cuTensorMapEncodeTiled((CUtensorMap *)desc128, types[t], 2, (void *)dev_ptr,
                                         dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
fail:
    return st;
}

cf_status cf_rt_tensor_map_2d(void *desc128, cf_dtype t, const void *dev_ptr, uint64_t rows,
                              uint64_t cols, uint64_t pitch, uint32_t box_rows,
                              uint32_t box_cols, int swizzle, cf_error *err)
{
    return cf_rt_tensor_map_2d_named(desc128, NULL, t, dev_ptr, rows, cols, pitch, box_rows,
                                     box_cols, swizzle, err);
}
