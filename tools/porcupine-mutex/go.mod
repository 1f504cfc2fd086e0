module porcupine-mutex

go 1.16

require github.com/anishathalye/porcupine v0.0.0

// A clone of https://github.com/anishathalye/porcupine beside this project
// (the figures in docs/performance.md used its commit 55508eb).
replace github.com/anishathalye/porcupine => ../../../porcupine
