"""`python -m kdist.doctor` (and the doctor's own probe processes)."""

from kdist.doctor.checkup import main

if __name__ == "__main__":
    main()
