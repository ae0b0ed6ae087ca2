/*
 * libstdc++'s exception probes (provider `libstdcxx`, written with
 * sys/sdt.h in libsupc++): the exception object and its std::type_info.
 * Checked against Debian's libstdc++.so.6 (GCC 12) notes.
 */
typedef struct type_info type_info;

provider libstdcxx {
    /* __cxa_throw, __cxa_rethrow, __cxa_begin_catch. */
    probe throw(void *obj, type_info *tinfo);
    probe rethrow(void *obj, type_info *tinfo);
    probe catch(void *obj, type_info *tinfo);
};
