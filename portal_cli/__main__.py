from portal_cli.main import main

main()
