"""The parts of an exercise's kernel that the learner does not write.

A scaffold is a module the notebook's ``%%cute_compile`` cell imports: the cell defines the
functions the lesson teaches and passes them to the scaffold's host function, which builds
everything else and launches the kernel with them (a ``cutlass.Constexpr`` argument may be any
Python object, a ``@cute.jit`` function included, and is traced into the kernel where it is
called). The compile workers of :mod:`pearl_moe.course.scratch` import it like any module of the
package; a scratch compile's cache key holds the text of every scaffold, so editing one compiles
the cells that use it again.
"""
