/*
 * Ruby's probes (provider `ruby`), with the argument names of its probes.d.
 * Checked against Debian's libruby3.1 notes.
 */
provider ruby {
    /* A Ruby or C method is entered or returns: class, method, and the caller's file and line. */
    probe method__entry(const char *classname, const char *methodname,
                        const char *filename, int lineno);
    probe method__return(const char *classname, const char *methodname,
                         const char *filename, int lineno);
    probe cmethod__entry(const char *classname, const char *methodname,
                         const char *filename, int lineno);
    probe cmethod__return(const char *classname, const char *methodname,
                          const char *filename, int lineno);

    /* require and load: the file asked for, and the caller's file and line. */
    probe require__entry(const char *requiredfile, const char *filename, int lineno);
    probe require__return(const char *requiredfile, const char *filename, int lineno);
    probe find__require__entry(const char *requiredfile, const char *filename, int lineno);
    probe find__require__return(const char *requiredfile, const char *filename, int lineno);
    probe load__entry(const char *loadedfile, const char *filename, int lineno);
    probe load__return(const char *loadedfile, const char *filename, int lineno);

    probe raise(const char *classname, const char *filename, int lineno);

    /* Allocations: the class or length, and where. */
    probe object__create(const char *classname, const char *filename, int lineno);
    probe array__create(long length, const char *filename, int lineno);
    probe hash__create(long length, const char *filename, int lineno);
    probe string__create(long length, const char *filename, int lineno);
    probe symbol__create(const char *string, const char *filename, int lineno);

    probe parse__begin(const char *sourcefile, int lineno);
    probe parse__end(const char *sourcefile, int lineno);

    probe gc__mark__begin();
    probe gc__mark__end();
    probe gc__sweep__begin();
    probe gc__sweep__end();
};
