package tui

import (
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/views/chat"
	"github.com/llmkube/mesh/tui/views/detail"
	"github.com/llmkube/mesh/tui/views/doctor"
	"github.com/llmkube/mesh/tui/views/events"
	"github.com/llmkube/mesh/tui/views/help"
	"github.com/llmkube/mesh/tui/views/hosts"
	"github.com/llmkube/mesh/tui/views/models"
	"github.com/llmkube/mesh/tui/views/place"
)

// builtinViews are the views compiled into the console, by page.
func builtinViews() map[common.Page]func(*common.Context) common.Component {
	return map[common.Page]func(*common.Context) common.Component{
		common.PageHosts:      func(c *common.Context) common.Component { return hosts.New(c) },
		common.PageModels:     func(c *common.Context) common.Component { return models.New(c) },
		common.PagePlace:      func(c *common.Context) common.Component { return place.New(c) },
		common.PageChat:       func(c *common.Context) common.Component { return chat.New(c) },
		common.PageEvents:     func(c *common.Context) common.Component { return events.New(c) },
		common.PageDoctor:     func(c *common.Context) common.Component { return doctor.New(c) },
		common.PageHostDetail: func(c *common.Context) common.Component { return detail.New(c) },
		common.PageHelp:       func(c *common.Context) common.Component { return help.New(c) },
	}
}
