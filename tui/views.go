package tui

import (
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/views/help"
	"github.com/llmkube/mesh/tui/views/hosts"
)

// builtinViews are the views compiled into the console, by page.
func builtinViews() map[common.Page]func(*common.Context) common.Component {
	return map[common.Page]func(*common.Context) common.Component{
		common.PageHosts: func(c *common.Context) common.Component { return hosts.New(c) },
		common.PageHelp:  func(c *common.Context) common.Component { return help.New(c) },
	}
}
