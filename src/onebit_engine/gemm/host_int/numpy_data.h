/* An argument passed from Python either as a data pointer or, when data_off >= 0, as a numpy array object whose
 * data pointer sits at that offset of the object (native.py checks the offset once): id(x) costs nothing, while
 * any per-call way of getting an address (.ctypes.data) costs 1-3 us an array. Used by kernel.c and delta.c. */
#ifndef HOST_INT_NUMPY_DATA_H
#define HOST_INT_NUMPY_DATA_H
#include <stdint.h>

static inline void *numpy_data(const char *p, int64_t data_off) {
    return data_off >= 0 && p ? *(void *const *)(p + data_off) : (void *)p;
}
#endif
