module github.com/sortiehq/sortie

go 1.26
