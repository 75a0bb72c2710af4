"""The subcommands of the `mechmem` command, one module each (`mechmem.commands.main` dispatches).

Each analysis command is three functions: `parser(prog)` (its flags; nothing heavy imported), `outputs(ckpt,
args)` (the analysis on a loaded checkpoint: prints its tables, returns the files to write) and `main(argv, *,
prog)`. `mechmem analyse` calls every analysis command's `outputs` on one loaded checkpoint, with the flags
each command's own parser gives, so `mechmem analyse CKPT` and `mechmem heads CKPT` write the same numbers
for the same seed. The scripts in `analyses/` are thin entry points over the same `main` functions.
"""
