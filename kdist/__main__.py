"""`python -m kdist`: the `kdist` command (`kdist.command`)."""

from kdist.command import main

if __name__ == "__main__":
    main()
