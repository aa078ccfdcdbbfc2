from nodeagent.cli.main import main

main()
