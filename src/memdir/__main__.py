from memdir.cli import main

raise SystemExit(main())
