/*
 * CPython's probes (provider `python`), with the argument names of its
 * documentation ("Instrumenting CPython with DTrace and SystemTap").
 * Checked against Debian's python3.11 notes.
 */
provider python {
    /* A Python function starts or ends: its file, name and first line. */
    probe function__entry(const char *filename, const char *funcname, int lineno);
    probe function__return(const char *filename, const char *funcname, int lineno);
    /* A line is about to run (only while this probe is traced). */
    probe line(const char *filename, const char *funcname, int lineno);
    /* A collection of this generation starts; it ends with this many objects collected. */
    probe gc__start(int generation);
    probe gc__done(long collected);
    /* An import: the module's name; whether it was found. */
    probe import__find__load__start(const char *modulename);
    probe import__find__load__done(const char *modulename, int found);
    /* An audit event (sys.audit): its name and its arguments' tuple. */
    probe audit(const char *event, void *args);
    probe instance__new__start(const char *typename, const char *filename);
    probe instance__new__done(const char *typename, const char *filename);
    probe instance__delete__start(const char *typename, const char *filename);
    probe instance__delete__done(const char *typename, const char *filename);
};
