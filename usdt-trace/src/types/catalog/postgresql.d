/*
 * PostgreSQL's probes (provider `postgresql`), as PostgreSQL 13 to 15
 * declare them, with names for the arguments its documentation describes
 * ("Built-in DTrace Probes"). Checked against Debian's PostgreSQL 15
 * notes. A probe whose argument count differs (another version) is not
 * matched.
 */
typedef unsigned int LocalTransactionId;
typedef int LWLockMode;
typedef int LOCKMODE;
typedef unsigned int BlockNumber;
typedef unsigned int Oid;
typedef int ForkNumber;

provider postgresql {
    probe transaction__start(LocalTransactionId xid);
    probe transaction__commit(LocalTransactionId xid);
    probe transaction__abort(LocalTransactionId xid);

    /* LWLocks: the lock's tranche name and the mode asked for. */
    probe lwlock__acquire(const char *tranche, LWLockMode mode);
    probe lwlock__release(const char *tranche);
    probe lwlock__wait__start(const char *tranche, LWLockMode mode);
    probe lwlock__wait__done(const char *tranche, LWLockMode mode);
    probe lwlock__condacquire(const char *tranche, LWLockMode mode);
    probe lwlock__condacquire__fail(const char *tranche, LWLockMode mode);
    probe lwlock__acquire__or__wait(const char *tranche, LWLockMode mode);
    probe lwlock__acquire__or__wait__fail(const char *tranche, LWLockMode mode);

    /* Heavyweight locks: the four fields of the lock's tag, its type, the mode. */
    probe lock__wait__start(unsigned int tag1, unsigned int tag2, unsigned int tag3,
                            unsigned int tag4, unsigned int locktype, LOCKMODE mode);
    probe lock__wait__done(unsigned int tag1, unsigned int tag2, unsigned int tag3,
                           unsigned int tag4, unsigned int locktype, LOCKMODE mode);

    /* A query's text at each stage; statement__status its command tag. */
    probe query__parse__start(const char *query);
    probe query__parse__done(const char *query);
    probe query__rewrite__start(const char *query);
    probe query__rewrite__done(const char *query);
    probe query__plan__start();
    probe query__plan__done();
    probe query__execute__start();
    probe query__execute__done();
    probe query__start(const char *query);
    probe query__done(const char *query);
    probe statement__status(const char *status);

    /* sorttype: heap, index or datum; parallel: 0 serial, 1 worker, 2 leader. */
    probe sort__start(int sorttype, bool unique, int nkeys, int workmem,
                      bool randomaccess, int parallel);
    probe sort__done(bool external, long space);

    /* A buffer: fork, block, then tablespace, database and relation OIDs. */
    probe buffer__read__start(ForkNumber fork, BlockNumber block, Oid tablespace,
                              Oid database, Oid relation, int backend, bool extend);
    probe buffer__read__done(ForkNumber fork, BlockNumber block, Oid tablespace,
                             Oid database, Oid relation, int backend, bool extend,
                             bool found);
    probe buffer__flush__start(ForkNumber fork, BlockNumber block, Oid tablespace,
                               Oid database, Oid relation);
    probe buffer__flush__done(ForkNumber fork, BlockNumber block, Oid tablespace,
                              Oid database, Oid relation);
    probe buffer__checkpoint__start(int flags);
    probe buffer__checkpoint__sync__start();
    probe buffer__checkpoint__done();
    probe buffer__sync__start(int nbuffers, int dirty);
    probe buffer__sync__written(int buffer);
    probe buffer__sync__done(int nbuffers, int written, int dirty);
    probe buffer__write__dirty__start(ForkNumber fork, BlockNumber block, Oid tablespace,
                                      Oid database, Oid relation);
    probe buffer__write__dirty__done(ForkNumber fork, BlockNumber block, Oid tablespace,
                                     Oid database, Oid relation);

    probe deadlock__found();

    probe checkpoint__start(int flags);
    probe checkpoint__done(int written, int nbuffers, int added, int removed,
                           int recycled);
    probe clog__checkpoint__start(bool shutdown);
    probe clog__checkpoint__done(bool shutdown);
    probe subtrans__checkpoint__start(bool shutdown);
    probe subtrans__checkpoint__done(bool shutdown);
    probe multixact__checkpoint__start(bool shutdown);
    probe multixact__checkpoint__done(bool shutdown);
    probe twophase__checkpoint__start();
    probe twophase__checkpoint__done();

    probe smgr__md__read__start(ForkNumber fork, BlockNumber block, Oid tablespace,
                                Oid database, Oid relation, int backend);
    probe smgr__md__read__done(ForkNumber fork, BlockNumber block, Oid tablespace,
                               Oid database, Oid relation, int backend, int bytes,
                               int requested);
    probe smgr__md__write__start(ForkNumber fork, BlockNumber block, Oid tablespace,
                                 Oid database, Oid relation, int backend);
    probe smgr__md__write__done(ForkNumber fork, BlockNumber block, Oid tablespace,
                                Oid database, Oid relation, int backend, int bytes,
                                int requested);

    /* A WAL record: its resource manager and info flags. */
    probe wal__insert(unsigned char rmgr, unsigned char info);
    probe wal__switch();
    probe wal__buffer__write__dirty__start();
    probe wal__buffer__write__dirty__done();
};
