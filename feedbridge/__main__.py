from feedbridge.cli import main

main()
