# A stand-in for the template's kernel.py (report tests copy it, never run it).
