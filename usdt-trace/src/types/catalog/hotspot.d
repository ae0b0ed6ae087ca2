/*
 * OpenJDK HotSpot's probes (providers `hotspot` and `hs_private`), with
 * the argument names of its hotspot.d. Checked against Debian's OpenJDK 17
 * libjvm.so notes. HotSpot passes its names as an address and a length,
 * not NUL-terminated: they are shown here as `name` (an address) and
 * `name_len`, not read as strings.
 */
typedef unsigned char jbyte_t;

provider hotspot {
    probe class__loaded(jbyte_t *name, uintptr_t name_len, void *class_loader,
                        uintptr_t shared);
    probe class__unloaded(jbyte_t *name, uintptr_t name_len, void *class_loader,
                          uintptr_t shared);
    probe class__initialization__required(jbyte_t *name, uintptr_t name_len,
                                          void *class_loader, intptr_t thread_type);
    probe class__initialization__recursive(jbyte_t *name, uintptr_t name_len,
                                           void *class_loader, intptr_t thread_type, int wait);
    probe class__initialization__concurrent(jbyte_t *name, uintptr_t name_len,
                                            void *class_loader, intptr_t thread_type, int wait);
    probe class__initialization__erroneous(jbyte_t *name, uintptr_t name_len,
                                           void *class_loader, intptr_t thread_type, int wait);
    probe class__initialization__super__failed(jbyte_t *name, uintptr_t name_len,
                                               void *class_loader, intptr_t thread_type,
                                               int wait);
    probe class__initialization__clinit(jbyte_t *name, uintptr_t name_len,
                                        void *class_loader, intptr_t thread_type, int wait);
    probe class__initialization__error(jbyte_t *name, uintptr_t name_len,
                                       void *class_loader, intptr_t thread_type, int wait);
    probe class__initialization__end(jbyte_t *name, uintptr_t name_len,
                                     void *class_loader, intptr_t thread_type, int wait);
    probe vm__init__begin();
    probe vm__init__end();
    probe vm__shutdown();
    probe vmops__request(jbyte_t *name, uintptr_t name_len, int mode);
    probe vmops__begin(jbyte_t *name, uintptr_t name_len, int mode);
    probe vmops__end(jbyte_t *name, uintptr_t name_len, int mode);
    probe gc__begin(uintptr_t full);
    probe gc__end();
    probe mem__pool__gc__begin(jbyte_t *name, uintptr_t name_len, jbyte_t *pool_name,
                               uintptr_t pool_name_len, uintptr_t init_size, uintptr_t used,
                               uintptr_t committed, uintptr_t max_size);
    probe mem__pool__gc__end(jbyte_t *name, uintptr_t name_len, jbyte_t *pool_name,
                             uintptr_t pool_name_len, uintptr_t init_size, uintptr_t used,
                             uintptr_t committed, uintptr_t max_size);
    probe thread__start(jbyte_t *name, uintptr_t name_len, uintptr_t jtid, uintptr_t tid,
                        uintptr_t is_daemon);
    probe thread__stop(jbyte_t *name, uintptr_t name_len, uintptr_t jtid, uintptr_t tid,
                       uintptr_t is_daemon);
    probe thread__sleep__begin(int64_t millis);
    probe thread__sleep__end(int is_interrupted);
    probe thread__yield();
    probe thread__park__begin(uintptr_t parker, int is_absolute, int64_t time);
    probe thread__park__end(uintptr_t parker);
    probe thread__unpark(uintptr_t parker);
    probe method__compile__begin(jbyte_t *compiler, uintptr_t compiler_len,
                                 jbyte_t *class_name, uintptr_t class_name_len,
                                 jbyte_t *name, uintptr_t name_len,
                                 jbyte_t *signature, uintptr_t signature_len);
    probe method__compile__end(jbyte_t *compiler, uintptr_t compiler_len,
                               jbyte_t *class_name, uintptr_t class_name_len,
                               jbyte_t *name, uintptr_t name_len,
                               jbyte_t *signature, uintptr_t signature_len,
                               uintptr_t success);
    probe compiled__method__load(jbyte_t *class_name, uintptr_t class_name_len,
                                 jbyte_t *name, uintptr_t name_len,
                                 jbyte_t *signature, uintptr_t signature_len,
                                 void *code, uintptr_t code_len);
    probe compiled__method__unload(jbyte_t *class_name, uintptr_t class_name_len,
                                   jbyte_t *name, uintptr_t name_len,
                                   jbyte_t *signature, uintptr_t signature_len);
    probe monitor__contended__enter(uintptr_t jtid, uintptr_t monitor,
                                    jbyte_t *class_name, uintptr_t class_name_len);
    probe monitor__contended__entered(uintptr_t jtid, uintptr_t monitor,
                                      jbyte_t *class_name, uintptr_t class_name_len);
    probe monitor__contended__exit(uintptr_t jtid, uintptr_t monitor,
                                   jbyte_t *class_name, uintptr_t class_name_len);
    probe monitor__wait(uintptr_t jtid, uintptr_t monitor, jbyte_t *class_name,
                        uintptr_t class_name_len, uintptr_t millis);
    probe monitor__waited(uintptr_t jtid, uintptr_t monitor, jbyte_t *class_name,
                          uintptr_t class_name_len);
    probe monitor__notify(uintptr_t jtid, uintptr_t monitor, jbyte_t *class_name,
                          uintptr_t class_name_len);
    probe monitor__notifyAll(uintptr_t jtid, uintptr_t monitor, jbyte_t *class_name,
                             uintptr_t class_name_len);
    probe object__alloc(int tid, jbyte_t *class_name, uintptr_t class_name_len,
                        uintptr_t size);
    probe method__entry(int tid, jbyte_t *class_name, int class_name_len,
                        jbyte_t *name, int name_len, jbyte_t *signature, int signature_len);
    probe method__return(int tid, jbyte_t *class_name, int class_name_len,
                         jbyte_t *name, int name_len, jbyte_t *signature, int signature_len);
};

provider hs_private {
    probe safepoint__begin();
    probe safepoint__end();
};
