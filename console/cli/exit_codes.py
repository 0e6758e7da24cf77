"""The exit codes every ``specctl`` verb shares, in a module of their own so that
the parser, the verbs and the console can all name them without importing each other."""

EXIT_OK = 0  # done
EXIT_REFUSED = 1  # the supervisor or the model server said no
EXIT_USAGE = 2  # the command line or a setting is wrong
EXIT_NO_SUPERVISOR = 3  # nothing answers at the control socket
